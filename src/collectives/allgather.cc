// Ring allgather: each rank's block travels N-1 hops; chunked so blocks flow
// on while they arrive.  The ring at every size and rank count: a pair form
// (a send to and a receive from each peer, programs of their own that may go
// single copy) took 1.09-1.18x the ring's time through the fifo at 2 ranks,
// 0.99-1.18x at 4 on one host, and about twice it single copy
// (perf/RESULTS.md, 2026-12-01).
#include <algorithm>

#include "collectives/collectives.h"

namespace tern {

void planAllGatherRing(const PlanCtx& x, const void* src, void* dst, size_t bytesPerRank, Phase* ph) {
  const int n = x.nranks, r = x.pos();
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  ph->what = "allgather";
  // Position k of the ring carries the block of the rank standing there.
  auto block = [&](int k) { return d + static_cast<size_t>(x.rankAt(k)) * bytesPerRank; };
  if (n == 1) {
    if (s != d) x.mem->copy(d, s, bytesPerRank);
    return;
  }
  Conn* in = x.prev();
  Conn* out = x.next();
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  for (size_t off = 0; off < bytesPerRank; off += x.cfg->chunkBytes) {
    size_t len = std::min(x.cfg->chunkBytes, bytesPerRank - off);
    char* mine = block(r) + off;
    prog.add({nullptr, out, s + off, mine != s + off ? mine : nullptr, len});
    for (int t = 1; t <= n - 2; ++t) prog.add({in, out, nullptr, block(r - t) + off, len});
    prog.add({in, nullptr, nullptr, block(r + 1) + off, len});
  }
}

}  // namespace tern
