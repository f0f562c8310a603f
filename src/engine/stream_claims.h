// Which operation reads or writes a message on a stream (StreamMarks::reader /
// writer): an operation takes a stream's send side for its message
// (claimOut, issue order between ordered and interleaved messages) and lets
// go of every stream it holds when it completes or a reframing phase ends.
#pragma once
#include "engine/operation.h"

namespace tern {

// Whether `op` may write its next message on stream `out` now, taking it
// (StreamMarks::writer) until letGo.  What was issued first goes first: an
// interleaved message posted after an ordered operation that waits for the
// stream lets it go first (StreamMarks::wantedBy), and an ordered operation issued
// after an interleaved message that waits to go (StreamMarks::reservedAt) waits too.
bool claimOut(Operation& op, Conn* out);

// The operation lets go of the streams it holds (StreamMarks::reader / writer): at
// its completion, or at the end of a reframing phase.
void letGo(Operation& op);

}  // namespace tern
