// Broadcast down the ring from the root: root -> next -> ... -> the root's
// ring predecessor.  One streaming
// step per rank: every middle rank forwards bytes as they arrive, so the
// chain pipelines at burst granularity without explicit chunking.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/primitives.h"

namespace tern {

ternResult_t broadcast(Comm& c, const void* src, void* dst, size_t bytes, int root) {
  const int n = c.nranks;
  const int pos = (ringPos(c) - c.ringPos[root] + n) % n;
  char* d = static_cast<char*>(dst);
  if (n == 1) {
    if (src != dst) memcpy(d, src, bytes);
    return ternSuccess;
  }
  Program prog;
  if (pos == 0)
    prog.add({nullptr, nextConn(c), static_cast<const char*>(src), src != dst ? d : nullptr, bytes});
  else
    prog.add({prevConn(c), pos == n - 1 ? nullptr : nextConn(c), nullptr, d, bytes});
  return runProgram(c, prog, {}, "broadcast");
}

}  // namespace tern
