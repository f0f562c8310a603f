// All-to-all, gather and scatter: direct transfers between every rank and
// every other (or the root), one program per peer and direction, all driven
// together by the executor, so no order of arrival can deadlock.  Rank j's
// block is at buff + j * blockBytes (gather: the root's recvbuff; scatter:
// the root's sendbuff); a rank's own block is a local copy.  Blocks are
// plain transfers between the callers' buffers, so large ones between ranks
// on one host go single copy (Step::direct).
//
// Small all-to-all blocks (allToAllFitsFifos) go as one program instead:
// every send, then every receive.  Each send fits in its fifo whatever the
// peer does, so the sends never wait on anyone and the receives only on
// sends that are under way: no deadlock; and one program instead of
// 2(n-1) is less bookkeeping per call (it reuses the kept step storage: no
// allocation).  Since every send has left before the first receive writes,
// in place needs no staging copy either.  Peers are visited in shifted
// order (rank r sends to r+1, r+2, ... and receives from r-1, r-2, ...), so
// the peer a rank waits on first is the one that sent to it first, and no
// rank is everyone's first peer.
//
// The rank that only receives (gather's root, scatter's non-roots) also sends
// its descriptor the other way (a zero-byte step): two ranks that both think
// they are the root then find out, because each reads the other's
// descriptor, instead of both waiting for data that never comes.
#include "collectives/collectives.h"

namespace tern {

namespace {

void transfer(Phase* ph, Conn* in, Conn* out, const char* src, char* dst, size_t bytes) {
  Program p;
  if (bytes == 0) {  // the descriptor alone
    Step s;
    s.in = in;
    s.out = out;
    p.steps.push_back(s);
  } else {
    p.addTransfer(in, out, src, dst, bytes);
  }
  ph->progs.push_back(std::move(p));
}

// The peer k places after this rank (k = 1 .. n-1) and its block's offset.
int shifted(const PlanCtx& x, int k) { return (x.rank + k) % x.nranks; }
size_t blockAt(int peer, size_t blockBytes) { return static_cast<size_t>(peer) * blockBytes; }

// Sends first, then receives, in one program (see the file comment).  Plain
// steps, never single copy: a direct send is done only once its receiver has
// read it, and that receiver reads only after its own sends.
void planAllToAllSmall(const PlanCtx& x, const char* s, char* d, size_t blockBytes, Phase* ph) {
  const int n = x.nranks;
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  for (int k = 1; k < n; ++k) {
    const int p = shifted(x, k);
    prog.add({nullptr, x.conn(p), s + blockAt(p, blockBytes), nullptr, blockBytes});
  }
  for (int k = 1; k < n; ++k) {
    const int p = shifted(x, n - k);
    prog.add({x.conn(p), nullptr, nullptr, d + blockAt(p, blockBytes), blockBytes});
  }
}

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
  if (s != d) x.mem->copy(d + mine, s + mine, blockBytes);
  if (x.nranks == 1) return;
  if (allToAllFitsFifos(x, blockBytes)) return planAllToAllSmall(x, s, d, blockBytes, ph);
  for (int k = 1; k < x.nranks; ++k) {
    const int to = shifted(x, k), from = shifted(x, x.nranks - k);
    transfer(ph, nullptr, x.conn(to), s + blockAt(to, blockBytes), nullptr, blockBytes);
    transfer(ph, x.conn(from), nullptr, nullptr, d + blockAt(from, blockBytes), blockBytes);
  }
}

void planGather(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, int root,
                Phase* ph) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->what = "gather";
  if (x.rank != root) {
    transfer(ph, nullptr, x.conn(root), s, nullptr, blockBytes);
    transfer(ph, x.conn(root), nullptr, nullptr, nullptr, 0);
    return;
  }
  for (int p = 0; p < x.nranks; ++p) {
    char* at = d + static_cast<size_t>(p) * blockBytes;
    if (p != root) {
      transfer(ph, x.conn(p), nullptr, nullptr, at, blockBytes);
      transfer(ph, nullptr, x.conn(p), nullptr, nullptr, 0);
    } else if (at != s) {
      x.mem->copy(at, s, blockBytes);
    }
  }
}

void planScatter(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, int root,
                 Phase* ph) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->what = "scatter";
  if (x.rank != root) {
    transfer(ph, x.conn(root), nullptr, nullptr, d, blockBytes);
    transfer(ph, nullptr, x.conn(root), nullptr, nullptr, 0);
    return;
  }
  for (int p = 0; p < x.nranks; ++p) {
    const char* at = s + static_cast<size_t>(p) * blockBytes;
    if (p != root) {
      transfer(ph, nullptr, x.conn(p), at, nullptr, blockBytes);
      transfer(ph, x.conn(p), nullptr, nullptr, nullptr, 0);
    } else if (at != d) {
      x.mem->copy(d, at, blockBytes);
    }
  }
}

}  // namespace tern
