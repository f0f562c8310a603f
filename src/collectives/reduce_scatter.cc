// Ring reduce-scatter: block k of every rank is summed along the ring and
// lands on the rank owning it, chunked so sums flow on while they arrive.
// Two ranks with blocks of at least kPairFromBytes are a pair of transfers
// instead, as the 2-rank allgather (allgather.cc): each rank sends the other
// its block and reduces the one it receives into its result, programs of
// their own, direct steps, so out of a ternMemAlloc buffer the receiver
// reduces straight out of the sender's mapping and nobody copies.  Through
// the fifo it moves and reduces what the ring does, at 1.00-1.16x the ring's
// speed from 512 KiB blocks; mapped 1.40-1.64x (perf/RESULTS.md,
// "2026-12-06: the 2-rank reduce-scatter as a pair of transfers").
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/transfers.h"

namespace tern {

namespace {
// The pair form: the other rank's block of this rank's input goes to it,
// which reduces it into its result, while this rank reduces the other's
// input's block of this rank into its own.
void planReduceScatterPair(const PlanCtx& x, const char* theirs, const char* mine, char* d, size_t bytes,
                           bool avg, Phase* ph) {
  Step send{nullptr, x.next(), theirs, nullptr, bytes};
  send.mutualReduce = true;
  planPair(ph, send, {x.prev(), nullptr, mine, d, bytes, true, avg});
}
}  // namespace

void planReduceScatter(const PlanCtx& x, const void* src, void* dst, size_t recvcount,
                       ternDataType_t dt, ternRedOp_t op, Phase* ph) {
  const int n = x.nranks, r = x.pos();
  const size_t esz = ternTypeSize(dt);
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->what = "reduce-scatter";
  ph->red = {dt, op};
  if (n == 1) {
    if (s != d) x.mem->copy(d, s, recvcount * esz);
    return;
  }
  const size_t blockBytes = recvcount * esz;
  const size_t chunk = std::max(esz, x.cfg->chunkBytes / esz * esz);
  // Position k of the ring handles the block of the rank standing there.
  auto block = [&](int k) { return s + static_cast<size_t>(x.rankAt(k)) * blockBytes; };
  if (n == 2 && blockBytes >= kPairFromBytes)
    return planReduceScatterPair(x, block(r + 1), block(r), d, blockBytes, op == ternAvg, ph);
  Conn* in = x.prev();
  Conn* out = x.next();
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  for (size_t off = 0; off < blockBytes; off += chunk) {
    size_t len = std::min(chunk, blockBytes - off);
    prog.add({nullptr, out, block(r - 1) + off, nullptr, len});
    for (int st = 1; st <= n - 2; ++st)
      prog.add({in, out, block(r - 1 - st) + off, nullptr, len, true});
    prog.add({in, nullptr, block(r) + off, d + off, len, true, op == ternAvg});
  }
}

}  // namespace tern
