// The CUDA memory type's own streams (one per operation in flight, reused):
// an operation's kernels run there, not on the caller's stream, because the
// caller's stream is held until the operation ends (stream_hold.h) and its
// own kernels must not queue behind that hold.  Non-blocking, so the legacy
// default stream does not serialise them.  And the events its fences record
// on them: taken before the hold, on the caller's thread (cuda_ops.cu,
// CudaOps::prepare), so the progress thread never creates one.  Both are
// kept per device (the calling thread's current one), never freed.
#pragma once

namespace tern {

void* borrowWorkStream();  // nullptr when no stream could be made
void giveBackWorkStream(void* stream);
// A cudaEvent_t (timing disabled) into *event; the cudaError_t as an int.
int borrowEvent(void** event);
void giveBackEvent(void* event);

}  // namespace tern
