// Which operation holds a stream's send or receive side (stream_claims.h).
#include "engine/stream_claims.h"

#include <algorithm>

#include "engine/stream_marks.h"

namespace tern {

// A stream's send side belongs to one operation from its first message until
// it lets go (letGo); an interleaved operation takes a free one unless an
// ordered operation issued before its message was posted waits for it (so
// what was issued first goes first: "push; barrier" on one rank and "wait
// for the version; barrier" on the other cannot wait for each other).
// A reservation is its message's until that goes, on a stream it already
// holds or not; another waiting interleaved message renews its own the next
// round (its task is asked every round), before an ordered operation issued
// later asks again.
bool claimOut(Operation& op, Conn* out) {
  if (!out) return true;
  StreamMarks& m = marks(out);
  if (m.writer == &op) {
    if (op.unordered) m.reservedAt = UINT64_MAX;
    return true;
  }
  if (m.writer || (op.unordered ? m.wantedBy < op.phase.postedAt : m.reservedAt < op.stamp)) {
    if (!op.unordered) m.wantedBy = std::min(m.wantedBy, op.stamp);
    return false;
  }
  m.writer = &op;
  (op.unordered ? m.reservedAt : m.wantedBy) = UINT64_MAX;
  op.held.push_back(out);
  return true;
}

void letGo(Operation& op) {
  for (Conn* c : op.held) {
    StreamMarks& m = marks(c);
    if (m.writer == &op) m.writer = nullptr;
    if (m.reader == &op) m.reader = nullptr;
  }
  op.held.clear();
}

}  // namespace tern
