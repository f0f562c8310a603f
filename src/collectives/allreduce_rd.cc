// Recursive-doubling allreduce for small buffers: log2(N) exchanges of the
// whole buffer instead of 2(N-1) ring hops, so latency wins.  For N not a
// power of two, the first 2*rem ranks fold pairwise (even ranks hand their
// data to the odd neighbour and get the result back at the end).
//
// Each exchange is "send all, then receive and reduce"; the send always fits
// in the fifo because the allreduce picks this path only for buffers below
// TERN_SMALL_THRESHOLD, which is capped at a quarter of the fifo.
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/primitives.h"
#include "collectives/reduce_kernels.h"
#include "core/error.h"

namespace tern {

ternResult_t allReduceRecursiveDoubling(Comm& c, const void* src, void* dst, size_t count,
                                        ternDataType_t dt, ternRedOp_t op) {
  const int n = c.nranks, r = c.rank;
  const size_t bytes = count * ternTypeSize(dt);
  char* d = static_cast<char*>(dst);
  if (src != dst) memcpy(d, src, bytes);
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int rem = n - pow2;
  auto conn = [&](int peer) { return c.conns[peer].get(); };
  auto exchange = [&](Program& p, int peer) {
    p.add({nullptr, conn(peer), d, nullptr, bytes});
    p.add({conn(peer), nullptr, d, d, bytes, true});
  };

  Program prog;
  int newRank;
  if (r < 2 * rem && r % 2 == 0) {  // folded away: give data, get result
    prog.add({nullptr, conn(r + 1), d, nullptr, bytes});
    prog.add({conn(r + 1), nullptr, nullptr, d, bytes});
    newRank = -1;
  } else {
    if (r < 2 * rem) prog.add({conn(r - 1), nullptr, d, d, bytes, true});
    newRank = r < 2 * rem ? r / 2 : r - rem;
  }
  if (newRank >= 0) {
    for (int mask = 1; mask < pow2; mask <<= 1) {
      int pn = newRank ^ mask;
      exchange(prog, pn < rem ? pn * 2 + 1 : pn + rem);
    }
    if (r < 2 * rem) prog.add({nullptr, conn(r - 1), d, nullptr, bytes});
  }
  TERN_CHECK(runProgram(c, prog, {dt, op}, "allreduce (recursive doubling)"));
  if (op == ternAvg) divideKernel(d, count, dt, n);
  return ternSuccess;
}

ternResult_t allReduce(Comm& c, const void* src, void* dst, size_t count, ternDataType_t dt,
                       ternRedOp_t op) {
  if (c.nranks == 1) {
    if (src != dst) memcpy(dst, src, count * ternTypeSize(dt));
    return ternSuccess;
  }
  if (count * ternTypeSize(dt) <= c.cfg.smallBytes)
    return allReduceRecursiveDoubling(c, src, dst, count, dt, op);
  return allReduceRing(c, src, dst, count, dt, op);
}

}  // namespace tern
