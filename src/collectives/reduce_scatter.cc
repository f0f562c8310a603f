// Ring reduce-scatter: the first half of the ring allreduce.  The rank at
// ring position r ends owning its own block, reduced over all ranks.  Pieces of TERN_CHUNKSIZE keep
// every rank's first send within its fifo.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/primitives.h"

namespace tern {

ternResult_t reduceScatter(Comm& c, const void* src, void* dst, size_t recvcount,
                           ternDataType_t dt, ternRedOp_t op) {
  const int n = c.nranks, r = ringPos(c);
  const size_t esz = ternTypeSize(dt);
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  if (n == 1) {
    if (s != d) memcpy(d, s, recvcount * esz);
    return ternSuccess;
  }
  const size_t blockBytes = recvcount * esz;
  const size_t chunk = std::max(esz, c.cfg.chunkBytes / esz * esz);
  // Position k of the ring handles the block of the rank standing there.
  auto block = [&](int k) { return s + static_cast<size_t>(ringRank(c, k)) * blockBytes; };
  Conn* in = prevConn(c);
  Conn* out = nextConn(c);
  Program prog;
  for (size_t off = 0; off < blockBytes; off += chunk) {
    size_t len = std::min(chunk, blockBytes - off);
    prog.add({nullptr, out, block(r - 1) + off, nullptr, len});
    for (int st = 1; st <= n - 2; ++st)
      prog.add({in, out, block(r - 1 - st) + off, nullptr, len, true});
    prog.add({in, nullptr, block(r) + off, d + off, len, true, op == ternAvg});
  }
  return runProgram(c, prog, {dt, op}, "reduce-scatter");
}

}  // namespace tern
