// Ring allgather: each rank's block travels N-1 hops; the rank at ring
// position r forwards the block of position r-t at step t.  Blocks go in TERN_CHUNKSIZE pieces so every rank's first
// send fits in its fifo (all ranks send before anyone receives).
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/primitives.h"

namespace tern {

ternResult_t allGather(Comm& c, const void* src, void* dst, size_t bytesPerRank) {
  const int n = c.nranks, r = ringPos(c);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Position k of the ring carries the block of the rank standing there.
  auto block = [&](int k) { return d + static_cast<size_t>(ringRank(c, k)) * bytesPerRank; };
  if (n == 1) {
    if (s != d) std::copy(s, s + bytesPerRank, d);
    return ternSuccess;
  }
  Conn* in = prevConn(c);
  Conn* out = nextConn(c);
  Program prog;
  for (size_t off = 0; off < bytesPerRank; off += c.cfg.chunkBytes) {
    size_t len = std::min(c.cfg.chunkBytes, bytesPerRank - off);
    char* mine = block(r) + off;
    prog.add({nullptr, out, s + off, mine != s + off ? mine : nullptr, len});
    for (int t = 1; t <= n - 2; ++t) prog.add({in, out, nullptr, block(r - t) + off, len});
    prog.add({in, nullptr, nullptr, block(r + 1) + off, len});
  }
  return runProgram(c, prog, {}, "allgather");
}

}  // namespace tern
