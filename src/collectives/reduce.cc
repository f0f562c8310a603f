// Reduce along the ring from the root's successor back to the root: each rank adds its
// contribution to the stream as it passes, the root writes the result.  One
// streaming step per rank, pipelined like broadcast.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/primitives.h"

namespace tern {

ternResult_t reduce(Comm& c, const void* src, void* dst, size_t count, ternDataType_t dt,
                    ternRedOp_t op, int root) {
  const int n = c.nranks;
  const size_t bytes = count * ternTypeSize(dt);
  const char* s = static_cast<const char*>(src);
  if (n == 1) {
    if (src != dst) memcpy(dst, src, bytes);
    return ternSuccess;
  }
  const int pos = (ringPos(c) - c.ringPos[root] - 1 + 2 * n) % n;  // 0: first, n-1: root
  Program prog;
  if (pos == 0)
    prog.add({nullptr, nextConn(c), s, nullptr, bytes});
  else if (pos < n - 1)
    prog.add({prevConn(c), nextConn(c), s, nullptr, bytes, true});
  else
    prog.add({prevConn(c), nullptr, s, static_cast<char*>(dst), bytes, true, op == ternAvg});
  return runProgram(c, prog, {dt, op}, "reduce");
}

}  // namespace tern
