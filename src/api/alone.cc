// The small path for a blocking allreduce or barrier (alone.h).  Its steps
// are the recursive-doubling plan's (recursiveDoublingSteps), so its bytes
// on every stream are the plan's: a peer whose engine was busy runs the same
// operation through its plan and still matches.  When the engine must take
// over (a late peer, a mismatch to report, a stream it cannot take whole),
// the operation is made then, planned in place on the result buffer (its
// input was copied there already, and steps done have reduced into it), and
// started at the step reached.
#include "api/alone.h"

#include "api/group.h"
#include "base/dtype.h"
#include "base/error.h"

namespace tern {

namespace {

// Only host buffers and built-in operations (a PreMulSum op scales its input
// first: the engine's), outside a group, between ranks.
bool applies(const Comm* c, const CollArgs& a, size_t bytes) {
  return (a.kind == OpKind::AllReduce || a.kind == OpKind::Barrier) && c->nranks > 1 &&
         static_cast<int>(a.op) < ternNumOps && c->mayRunAlone(bytes);
}

// The engine carries the operation from step `done` on; the caller waits.
ternResult_t handOver(Comm* c, CollArgs a, const PlanCtx& x, uint64_t seq, size_t done) {
  if (a.kind == OpKind::AllReduce) a.src = a.dst;
  OpPtr op = c->engine->newOperation();
  makeOp(c, op, a, nullptr);
  op->ctx = x;
  op->desc.seq = seq;
  c->engine->handOverAt(op, done);
  IssuedOps one{{c, std::move(op)}};
  return waitAll(one);
}

}  // namespace

bool allReduceAlone(Comm* c, const CollArgs& a, ternResult_t* r) {
  const size_t bytes = a.count * typeSize(a.dt);
  int level;
  if (!applies(c, a, bytes) || !soloCall(&level)) return false;
  OpDesc desc = callDesc(c, a, level);
  if (!c->claimAlone(level, &desc.seq)) return false;
  const PlanCtx x = c->planCtx(level);
  int token = 0;  // a barrier is a one-integer allreduce (tasks.cc)
  char* d = a.kind == OpKind::Barrier ? reinterpret_cast<char*>(&token) : static_cast<char*>(a.dst);
  if (a.kind == OpKind::AllReduce && a.src != a.dst) x.mem->copy(d, a.src, bytes);
  if (c->aloneSteps.empty()) c->aloneSteps.resize(kMaxRecursiveDoublingSteps);
  Step* steps = c->aloneSteps.data();
  size_t n = 0;
  recursiveDoublingSteps(x, d, bytes, [&](const Step& s) { steps[n++] = s; });
  const Reduction red{a.dt, a.kind == OpKind::Barrier ? ternMax : a.op};
  const size_t done = c->engine->runStepsAlone(desc, steps, n, red, x.nranks, *x.mem);
  if (done < n) {
    *r = handOver(c, a, x, desc.seq, done);
    return true;
  }
  if (a.kind == OpKind::AllReduce && allReduceNeedsDivide(x, a.count, a.dt, a.op))
    x.mem->divide(a.dst, a.count, a.dt, x.nranks);
  *r = ternSuccess;
  return true;
}

}  // namespace tern
