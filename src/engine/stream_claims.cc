// Which operation holds a stream's send or receive side (stream_claims.h).
#include "engine/stream_claims.h"

#include <algorithm>

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
  if (out->writer == &op) {
    if (op.unordered) out->reservedAt = UINT64_MAX;
    return true;
  }
  if (out->writer || (op.unordered ? out->wantedBy < op.phase.postedAt : out->reservedAt < op.stamp)) {
    if (!op.unordered) out->wantedBy = std::min(out->wantedBy, op.stamp);
    return false;
  }
  out->writer = &op;
  (op.unordered ? out->reservedAt : out->wantedBy) = UINT64_MAX;
  op.held.push_back(out);
  return true;
}

void letGo(Operation& op) {
  for (Conn* c : op.held) {
    if (c->writer == &op) c->writer = nullptr;
    if (c->reader == &op) c->reader = nullptr;
  }
  op.held.clear();
}

}  // namespace tern
