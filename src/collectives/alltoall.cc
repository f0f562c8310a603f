// All-to-all, gather and scatter: direct transfers between every rank and
// every other (or the root), one program per peer and direction, all driven
// together by the executor, so no order of arrival can deadlock.  Rank j's
// block is at buff + j * blockBytes (gather: the root's recvbuff; scatter:
// the root's sendbuff); a rank's own block is a local copy.  Blocks are
// plain transfers between the callers' buffers, so large ones between ranks
// on one host go single copy (Step::direct).
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

}  // namespace

void planAllToAll(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, Phase* ph) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->what = "all-to-all";
  for (int p = 0; p < x.nranks; ++p) {
    size_t off = static_cast<size_t>(p) * blockBytes;
    if (p == x.rank) {
      if (s != d) x.mem->copy(d + off, s + off, blockBytes);
      continue;
    }
    transfer(ph, nullptr, x.conn(p), s + off, nullptr, blockBytes);
    transfer(ph, x.conn(p), nullptr, nullptr, d + off, blockBytes);
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
