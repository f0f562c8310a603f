// The CUDA memory type's own streams (one per operation in flight, reused):
// an operation's kernels run there, not on the caller's stream, because the
// caller's stream is held until the operation ends (stream_hold.h) and its
// own kernels must not queue behind that hold.  Non-blocking, so the legacy
// default stream does not serialise them.  Kept per device, never freed.
#pragma once

namespace tern {

void* borrowWorkStream();  // nullptr when no stream could be made
void giveBackWorkStream(void* stream);

}  // namespace tern
