// Recursive-doubling allreduce for small buffers: log2(N) exchanges of the
// whole buffer with partners at distance 1, 2, 4, ...  Ranks beyond the
// largest power of two first fold into a partner and get the result back at
// the end.  Latency-optimal; bandwidth is irrelevant at these sizes.
#include "base/dtype.h"
#include "collectives/collectives.h"

namespace tern {

void planAllReduceRecursiveDoubling(const PlanCtx& x, const void* src, void* dst, size_t count,
                                    ternDataType_t dt, ternRedOp_t op, Phase* ph) {
  const size_t bytes = count * typeSize(dt);
  char* d = static_cast<char*>(dst);
  if (src != dst) x.mem->copy(d, src, bytes);
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  recursiveDoublingSteps(x, d, bytes, [&](const Step& s) { prog.add(s); });
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
