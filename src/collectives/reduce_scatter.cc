// Ring reduce-scatter: block k of every rank is summed along the ring and
// lands on the rank owning it, chunked so sums flow on while they arrive.
#include <algorithm>
#include "collectives/collectives.h"

namespace tern {

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
