// Starting receives: numbering, and binding a receive from any source.
#include "engine/receive.h"

#include <cstring>

#include "base/error.h"
#include "base/log.h"

namespace tern {

namespace {

// The next message's descriptor on `c` if it has arrived whole.  Descriptors
// sit at 32-byte stream positions; padding before one that ends at the fifo's
// wrap point is consumed (the next layout starts from the new position).
bool peekDesc(Conn* c, OpDesc* d) {
  const char* p;
  size_t avail = c->recvAvail(&p);
  size_t skip = static_cast<size_t>((sizeof(OpDesc) - c->recvPos() % sizeof(OpDesc)) % sizeof(OpDesc));
  if (skip && avail == skip) {
    c->recvConsume(skip);
    avail = c->recvAvail(&p);
    skip = 0;
  }
  if (avail < skip + sizeof(OpDesc)) return false;
  memcpy(d, p + skip, sizeof *d);
  return true;
}

// Whether peer q's next message on this level is a send to this rank.
ternResult_t sendArrived(const Operation& op, int q, bool* yes) {
  *yes = false;
  Conn* c = op.ctx.conn(q);
  TERN_CHECK(c->activate());
  bool moved = false;
  if (c->needsProgress()) TERN_CHECK(c->progress(&moved));
  OpDesc d;
  *yes = peekDesc(c, &d) && d.magic == kDescMagic && d.kind == OpKind::Send && d.root == op.ctx.rank &&
         d.level == op.level;
  return ternSuccess;
}

// Binds an unbound receive to the first peer (from a rotating start, so no
// peer is always preferred) whose send has arrived.
ternResult_t bindAnySource(Operation& op, bool* bound) {
  const int n = op.ctx.nranks, me = op.ctx.rank;
  if (op.idleSince == Clock::time_point{}) op.idleSince = Clock::now();  // its timeout runs from here
  for (int i = 1; i < n; ++i) {
    int q = (me + op.anySourceTurn + i) % n;
    bool arrived = false;
    TERN_CHECK(sendArrived(op, q, &arrived));
    if (!arrived) continue;
    op.peer = q;
    op.desc.root = q;
    op.task->bindPeer(q);
    if (op.anySource) *op.anySource = q;
    TERN_LOG(Trace, "recv from any source at level %d: rank %d sent first", op.level, q);
    *bound = true;
    return ternSuccess;
  }
  ++op.anySourceTurn;
  *bound = false;
  return ternSuccess;
}

}  // namespace

ternResult_t startRecv(Operation& op, std::vector<uint64_t>& recvSeq, bool* ready) {
  *ready = true;
  if (op.peer < 0) TERN_CHECK(bindAnySource(op, ready));
  if (!*ready) return ternSuccess;
  recvSeq.resize(static_cast<size_t>(op.ctx.nranks) * TERN_PRIORITY_LEVELS, 0);
  op.desc.seq = recvSeq[static_cast<size_t>(op.peer) * TERN_PRIORITY_LEVELS + op.level]++;
  return ternSuccess;
}

}  // namespace tern
