// Ring allgather: each rank's block travels N-1 hops; chunked so blocks flow
// on while they arrive.  Two ranks with large blocks: one hop each way, the
// send and the receive programs of their own that may go single copy.
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/transfers.h"

namespace tern {

void planAllGather(const PlanCtx& x, const void* src, void* dst, size_t bytesPerRank, Phase* ph) {
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
  // Two ranks, blocks of 256 KiB and more: where single copy paid for
  // allgather (perf/RESULTS.md, 2026-11-28).  Below it the ring's one program costs less
  // per call (8 KiB-128 KiB: 1.04-1.30x the time as programs of their own).
  // A constant, not this rank's TERN_SHM_DIRECT: both ranks must make the
  // same plan (a direct-marked step at or above the connection's agreed
  // threshold carries a header even where its payload streams), and ranks
  // may disagree on the setting.
  constexpr size_t kPairFrom = 256 << 10;
  if (n == 2 && bytesPerRank >= kPairFrom) {  // one hop each way: plain transfers, as all-to-all's
    Transfers t(ph, false);
    t.send(x.next(), s, bytesPerRank);
    t.local(s, block(r), bytesPerRank);
    t.recv(x.prev(), block(r + 1), bytesPerRank);
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
