// All-to-all, gather and scatter: direct transfers between every rank and
// every other (or the root), one program per peer and direction, all driven
// together by the executor, so no order of arrival can deadlock.  Rank j's
// block is at buff + j * blockBytes (gather: the root's recvbuff; scatter:
// the root's sendbuff); a rank's own block is a local copy, a step with no
// connection placed after the sends: the peers' blocks leave first, and the
// copy runs while they travel (it was a plan-time copy before any send, which
// a receiving root paid ahead of its whole receive).  Blocks are
// plain transfers between the callers' buffers, so large ones between ranks
// on one host go single copy (Step::direct).
//
// Small blocks (allToAllFitsFifos) go as one program instead: every send,
// then every receive.  Each send fits in its fifo whatever the peer does, so
// the sends never wait on anyone and the receives only on sends that are
// under way: no deadlock; and one program instead of 2(n-1) is less
// bookkeeping per call (it reuses the kept step storage: no allocation).
// Since every all-to-all send has left before the first receive writes, in
// place needs no staging copy either.  Peers are visited in shifted order
// (rank r sends to r+1, r+2, ... and receives from r-1, r-2, ...), so the
// peer a rank waits on first is the one that sent to it first, and no rank
// is everyone's first peer.
//
// The rank that only receives (gather's root, scatter's non-roots) also sends
// its descriptor the other way (a zero-byte step): two ranks that both think
// they are the root then find out, because each reads the other's
// descriptor, instead of both waiting for data that never comes.
#include "collectives/collectives.h"
#include "collectives/transfers.h"

namespace tern {

namespace {

// The peer k places after this rank (k = 1 .. n-1) and its block's offset.
int shifted(const PlanCtx& x, int k) { return (x.rank + k) % x.nranks; }
size_t blockAt(int peer, size_t blockBytes) { return static_cast<size_t>(peer) * blockBytes; }

}  // namespace

bool allToAllFitsFifos(const PlanCtx& x, size_t blockBytes) {
  // A quarter of the fifo: the block, its descriptor and padding fit beside
  // a previous call's message that the peer has not read yet.
  return blockBytes <= x.cfg->smallBytes && blockBytes + 2 * sizeof(OpDesc) <= x.cfg->fifoBytes / 4;
}

void planAllToAll(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, Phase* ph) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  const size_t mine = blockAt(x.rank, blockBytes);
  ph->what = "all-to-all";
  if (x.nranks == 1) {
    if (s != d) x.mem->copy(d + mine, s + mine, blockBytes);
    return;
  }
  Transfers t(ph, allToAllFitsFifos(x, blockBytes));
  for (int k = 1; k < x.nranks; ++k) {
    const int to = shifted(x, k);
    t.send(x.conn(to), s + blockAt(to, blockBytes), blockBytes);
  }
  t.local(s + mine, d + mine, blockBytes);
  for (int k = 1; k < x.nranks; ++k) {
    const int from = shifted(x, x.nranks - k);
    t.recv(x.conn(from), d + blockAt(from, blockBytes), blockBytes);
  }
}

void planGather(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, int root,
                Phase* ph) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->what = "gather";
  if (x.nranks == 1) {
    if (d != s) x.mem->copy(d, s, blockBytes);
    return;
  }
  Transfers t(ph, allToAllFitsFifos(x, blockBytes));
  if (x.rank != root) {
    t.send(x.conn(root), s, blockBytes);
    t.hear(x.conn(root), blockBytes);
    return;
  }
  for (int k = 1; k < x.nranks; ++k) t.greet(x.conn(shifted(x, k)));
  t.local(s, d + blockAt(root, blockBytes), blockBytes);
  for (int k = 1; k < x.nranks; ++k) {
    const int from = shifted(x, k);
    t.recv(x.conn(from), d + blockAt(from, blockBytes), blockBytes);
  }
}

void planScatter(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, int root,
                 Phase* ph) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->what = "scatter";
  if (x.nranks == 1) {
    if (d != s) x.mem->copy(d, s, blockBytes);
    return;
  }
  Transfers t(ph, allToAllFitsFifos(x, blockBytes));
  if (x.rank != root) {
    t.greet(x.conn(root));
    t.recv(x.conn(root), d, blockBytes);
    return;
  }
  for (int k = 1; k < x.nranks; ++k) {
    const int to = shifted(x, k);
    t.send(x.conn(to), s + blockAt(to, blockBytes), blockBytes);
  }
  t.local(s + blockAt(root, blockBytes), d, blockBytes);
  for (int k = 1; k < x.nranks; ++k) t.hear(x.conn(shifted(x, k)), blockBytes);
}

}  // namespace tern
