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

}  // namespace tern
