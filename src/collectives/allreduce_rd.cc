// Recursive-doubling allreduce for small buffers: log2(N) exchanges of the
// whole buffer with partners at distance 1, 2, 4, ...  Ranks beyond the
// largest power of two first fold into a partner and get the result back at
// the end.  Latency-optimal; bandwidth is irrelevant at these sizes.
#include "base/dtype.h"
#include "collectives/collectives.h"

namespace tern {

void planAllReduceRecursiveDoubling(const PlanCtx& x, const void* src, void* dst, size_t count,
                                    ternDataType_t dt, ternRedOp_t op, Phase* ph) {
  const int n = x.nranks, r = x.rank;
  const size_t bytes = count * typeSize(dt);
  char* d = static_cast<char*>(dst);
  if (src != dst) x.mem->copy(d, src, bytes);
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int rem = n - pow2;
  auto conn = [&](int peer) { return x.conn(peer); };
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  auto exchange = [&](int peer) {
    prog.add({nullptr, conn(peer), d, nullptr, bytes});
    prog.add({conn(peer), nullptr, d, d, bytes, true});
  };
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
      exchange(pn < rem ? pn * 2 + 1 : pn + rem);
    }
    if (r < 2 * rem) prog.add({nullptr, conn(r - 1), d, nullptr, bytes});
  }
  ph->red = {dt, op};
  ph->what = "allreduce (recursive doubling)";
}

static bool useRecursiveDoubling(const PlanCtx& x, size_t count, ternDataType_t dt) {
  return count * typeSize(dt) <= x.cfg->smallBytes;
}

bool allReduceNeedsDivide(const PlanCtx& x, size_t count, ternDataType_t dt, ternRedOp_t op) {
  return op == ternAvg && x.nranks > 1 && useRecursiveDoubling(x, count, dt);
}

void planAllReduce(const PlanCtx& x, const void* src, void* dst, size_t count, ternDataType_t dt,
                   ternRedOp_t op, Phase* ph) {
  ph->what = "allreduce";
  if (x.nranks == 1) {
    if (src != dst) x.mem->copy(dst, src, count * typeSize(dt));
    return;
  }
  if (useRecursiveDoubling(x, count, dt))
    planAllReduceRecursiveDoubling(x, src, dst, count, dt, op, ph);
  else
    planAllReduceRing(x, src, dst, count, dt, op, ph);
}

}  // namespace tern
