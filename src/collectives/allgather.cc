// Ring allgather: each rank's block travels N-1 hops; chunked so blocks flow
// on while they arrive.  The ring at every rank count and size, but for two
// ranks with blocks of at least kPairFromBytes: there each rank's block
// makes one hop, so the plan is a send to and a receive from the other rank
// as programs of their own, plain transfers (Step::direct) that go one copy
// out of a ternMemAlloc buffer.  In the slow phase, through the fifo, the
// pair form ran at 0.91-1.03x the ring's speed (medians of two runs at
// 128 KiB-8 MiB blocks), mapped 1.35-1.44x from 512 KiB blocks (perf/RESULTS.md,
// "2026-12-06: host memory the peers map").  Below kPairFromBytes nothing
// would go mapped.
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/transfers.h"

namespace tern {

namespace {
constexpr size_t kPairFromBytes = 128 << 10;  // direct_transfer.cc's kSharedHostMin
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
  if (n == 2 && bytesPerRank >= kPairFromBytes) {  // the pair form (see above)
    Transfers t(ph, false);
    t.send(x.next(), s, bytesPerRank);
    t.recv(x.prev(), block(r + 1), bytesPerRank);
    t.local(s, block(r), bytesPerRank);
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
