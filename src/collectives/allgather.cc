// Ring allgather: each rank's block travels N-1 hops; chunked so blocks flow
// on while they arrive.  Two ranks with blocks of at least kPairFromBytes are
// a pair of transfers instead: each block makes one hop, so the plan is a
// send to and a receive from the other rank, programs of their own, plain
// transfers (Step::direct) that go one copy out of a ternMemAlloc buffer.
// The send copies its block into this rank's own slot as it streams, or,
// while the receiver reads the mapping, beside it (direct_transfer.cc).
// So through the fifo it copies what the ring copies: it ran at 0.97-1.05x
// the ring's speed (medians, slow phase; 0.91-1.03x while its own copy was
// a pass of its own), and 1.31-1.42x mapped from 256 KiB blocks
// (perf/RESULTS.md, "2026-12-06: the 2-rank allgather as a pair of
// transfers").
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/transfers.h"

namespace tern {

namespace {
// The pair form: a send of this rank's block (copied into its own slot on
// the way) and a receive of the other's.
void planAllGatherPair(const PlanCtx& x, const char* s, char* mine, char* theirs, size_t bytes, Phase* ph) {
  planPair(ph, {nullptr, x.next(), s, mine != s ? mine : nullptr, bytes},
           {x.prev(), nullptr, nullptr, theirs, bytes});
}
}  // namespace

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
  if (n == 2 && bytesPerRank >= kPairFromBytes)
    return planAllGatherPair(x, s, block(r), block(r + 1), bytesPerRank, ph);
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
