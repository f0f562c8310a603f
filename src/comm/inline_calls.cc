// The small path for a blocking collective (inline_calls.h).  Its steps are the
// plan's (recursiveDoublingSteps, planPure), so its bytes on every stream are
// the plan's: a peer whose engine was busy runs the same operation through
// its plan and still matches.  When the engine must take over (a late peer,
// a mismatch to report, a stream it cannot take whole), the operation is
// made then and started where the path stood.
#include "comm/inline_calls.h"

#include "comm/operations.h"
#include "base/dtype.h"
#include "base/error.h"

namespace tern {

namespace {

// What the engine decides from (engine/inline_choice.h): a call run
// without an operation.
InlineWork callWork(const CollArgs& a) {
  InlineWork w;
  w.bytes = a.count * typeSize(a.dt);
  w.preMul = static_cast<int>(a.op) >= ternNumOps;
  w.anySource = a.source != nullptr;
  w.withoutOperation = true;
  return w;
}

// A call outside a group that the engine runs inline.
bool applies(const Comm* c, const CollArgs& a) { return runsInline(c->inlineSettings(), callWork(a)); }

// What the inline runner keeps between calls (the token's holder only).
KeptPlans& kept(Comm* c) { return c->engine->inlineRunner().kept(); }

// The engine carries the operation from where the path left it; the caller
// waits.
ternResult_t waitFor(Comm* c, OpPtr op) {
  IssuedOps one{{c, std::move(op)}};
  return waitAll(one);
}

OpPtr operationFor(Comm* c, const CollArgs& a, const PlanCtx& x, uint64_t seq, int level) {
  OpPtr op = c->engine->newOperation();
  makeOp(c, op, a, nullptr, level);
  op->ctx = x;
  op->desc.seq = seq;
  return op;
}

// A kept call's key, and whether a call repeats it (the same arguments at
// the same level).
KeptPlans::Key keyOf(const CollArgs& a, int level) {
  return {static_cast<int>(a.kind), level, a.dt, a.op, a.root, a.src, a.dst, a.count};
}
bool sameKey(const KeptPlans::Key& k, const CollArgs& a, int level) {
  return k.level == level && k.kind == static_cast<int>(a.kind) && k.src == a.src && k.dst == a.dst &&
         k.count == a.count && k.dt == a.dt && k.op == a.op && k.root == a.root;
}

// Allreduce and barrier: the recursive-doubling steps; handed over, the
// operation is planned in place on the result buffer (its input was copied
// there already, and steps done have reduced into it) from the step reached.
// An allreduce that repeats the last one keeps its steps and descriptor (a
// barrier's steps point at its own stack: made anew).  The kept ones are read
// and replaced only while the token is held.
bool allReduceAlone(Comm* c, const CollArgs& a, int level, ternResult_t* r) {
  uint64_t seq;
  if (!c->claimAlone(level, &seq)) return false;
  const bool keep = a.kind == OpKind::AllReduce;
  InlineRunner& runner = c->engine->inlineRunner();
  KeptPlans& k = runner.kept();
  const bool again = keep && sameKey(k.stepsKey, a, level);
  OpDesc desc = again ? k.stepsDesc : callDesc(c, a, level);
  desc.seq = seq;
  const size_t bytes = a.count * typeSize(a.dt);
  const PlanCtx x = c->planCtx(level);
  int token = 0;  // a barrier is a one-integer allreduce (tasks.cc)
  char* d = keep ? static_cast<char*>(a.dst) : reinterpret_cast<char*>(&token);
  if (keep && a.src != a.dst) x.mem->copy(d, a.src, bytes);
  if (k.steps.empty()) k.steps.resize(kMaxRecursiveDoublingSteps);
  Step* steps = k.steps.data();
  size_t n = again ? k.stepsN : 0, scratchWhole = 0;
  if (!again) {
    recursiveDoublingSteps(x, d, bytes, [&](const Step& s) { steps[n++] = s; });
    k.stepsKey = keep ? keyOf(a, level) : KeptPlans::Key{};
    k.stepsDesc = desc;
    k.stepsN = n;
    k.stepsWhole = 0;
  }
  const Reduction red{a.dt, keep ? a.op : ternMax};
  const size_t done =
      runner.runStepsAlone(desc, steps, n, red, x.nranks, *x.mem, keep ? &k.stepsWhole : &scratchWhole);
  if (done < n) {
    CollArgs inPlace = a;
    if (keep) inPlace.src = inPlace.dst;
    OpPtr op = operationFor(c, inPlace, x, desc.seq, level);
    runner.handOverAt(op, done);
    *r = waitFor(c, std::move(op));
    return true;
  }
  if (keep && allReduceNeedsDivide(x, a.count, a.dt, a.op)) x.mem->divide(a.dst, a.count, a.dt, x.nranks);
  *r = ternSuccess;
  return true;
}

// The engine's kept phase planned anew for the call, kept for the calls
// that repeat it (the token held: Comm::claimAlone).  Planning a two-rank broadcast cost ~1,700 of its
// ~5,500 instructions per call (callgrind; perf/RESULTS.md, 2026-11-29: rooted
// collectives stop waiting for their peers' descriptors).
Phase& planAnew(Comm* c, const OpDesc& desc, const CollArgs& a, int level, const PlanCtx& x) {
  Phase& ph = kept(c).phase;
  resetPhase(ph);
  planPure(a, x, &ph);
  kept(c).phaseKey = keyOf(a, level);
  kept(c).phaseDesc = desc;
  return ph;
}

Phase& rewound(Phase& ph) {
  for (Program& p : ph.progs) p.cur = 0;
  return ph;
}

// Other collectives whose plan does no local work: planned into the
// engine's kept phase (once for a call that repeats) and run from
// it; handed over, the operation plans the same again and starts each
// program where this one stood.
[[gnu::always_inline]] inline bool plannedAlone(Comm* c, const CollArgs& a, int level, ternResult_t* r) {
  const PlanCtx x = c->planCtx(level);
  if (!plansPurely(a, x)) return false;
  uint64_t seq;
  if (!c->claimAlone(level, &seq)) return false;
  // The kept plan is read and replaced only while the token is held.
  const bool again = sameKey(kept(c).phaseKey, a, level);
  OpDesc desc = again ? kept(c).phaseDesc : callDesc(c, a, level);
  desc.seq = seq;
  Phase& ph = again ? rewound(kept(c).phase) : planAnew(c, desc, a, level, x);
  AloneGreetings greeted;
  if (c->engine->inlineRunner().runPhaseAlone(desc, ph, *x.mem, x.nranks, greeted)) {
    *r = ternSuccess;
    return true;
  }
  OpPtr op = operationFor(c, a, x, desc.seq, level);
  c->engine->inlineRunner().handOverPhase(op, ph, greeted);
  *r = waitFor(c, std::move(op));
  return true;
}

}  // namespace

bool mayRecord(const Comm* c, const CollArgs& a) {
  return (a.kind == OpKind::Send || a.kind == OpKind::Recv) && runsInline(c->inlineSettings(), callWork(a));
}

OpPtr recordedOp(Comm* c, const P2pCall& call) {
  OpPtr op = c->engine->newOperation();
  makeOp(c, op, call.a, nullptr, call.level);
  return op;
}

namespace {

static_assert(kMaxTransfers <= KeptPlans::Transfers::kMax, "a group's transfers fit what the engine keeps");

// Whether the group's calls are the ones kept, in the same order.
bool sameTransfers(const KeptPlans::Transfers& m, const P2pCall* calls, size_t n) {
  if (m.n != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (!sameKey(m.keys[i], calls[i].a, calls[i].level)) return false;
  return true;
}

// Whether two of the calls share a stream: each stream carries one message
// of the group, so each goes whole, in issue order.
bool shareStream(const P2pCall* calls, size_t n) {
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < i; ++j)
      if (calls[j].a.root == calls[i].a.root && calls[j].a.kind == calls[i].a.kind &&
          calls[j].level == calls[i].level)
        return true;
  return false;
}

// The calls' descriptors (their sequence numbers aside) and steps, kept for
// a group that repeats them (the token held: Comm::claimTransfers).
void keepTransfers(Comm* c, const P2pCall* calls, size_t n) {
  KeptPlans::Transfers& m = kept(c).transfers;
  for (size_t i = 0; i < n; ++i) {
    const PlanCtx x = c->planCtx(calls[i].level);
    m.keys[i] = keyOf(calls[i].a, calls[i].level);
    m.descs[i] = callDesc(c, calls[i].a, calls[i].level);
    m.steps[i] = p2pStep(calls[i].a, x.conn(calls[i].a.root));  // each its plan's step
  }
  m.whole = false;
  m.n = n;
}

}  // namespace

bool transfersInline(Comm* c, const P2pCall* calls, size_t n, ternResult_t* r) {
  if (n > kMaxTransfers || shareStream(calls, n)) return false;
  Comm::Transfer t[kMaxTransfers];
  for (size_t i = 0; i < n; ++i) t[i] = {calls[i].a.root, calls[i].level, calls[i].a.kind == OpKind::Send};
  uint64_t seqs[kMaxTransfers];
  if (!c->claimTransfers(t, seqs, n)) return false;
  KeptPlans::Transfers& m = kept(c).transfers;
  if (!sameTransfers(m, calls, n)) keepTransfers(c, calls, n);
  for (size_t i = 0; i < n; ++i) m.descs[i].seq = seqs[i];
  bool done[kMaxTransfers];
  if (c->engine->inlineRunner().runTransfersAlone(m.descs, m.steps, n, c->nranks, *c->hostMem, &m.whole, done)) {
    *r = ternSuccess;
    return true;
  }
  IssuedOps rest;
  for (size_t i = 0; i < n; ++i)
    if (!done[i]) rest.emplace_back(c, operationFor(c, calls[i].a, c->planCtx(calls[i].level), m.descs[i].seq,
                                                    calls[i].level));
  for (auto& [k, op] : rest) c->engine->inlineRunner().handOverAt(op, 0);
  *r = waitAll(rest);
  return true;
}

bool callInline(Comm* c, const CollArgs& a, int level, ternResult_t* r) {
  switch (a.kind) {
    case OpKind::Send:
    case OpKind::Recv: {  // a blocking one outside a group: a group of one
      if (!mayRecord(c, a)) return false;
      const P2pCall call{a, level};
      return transfersInline(c, &call, 1, r);
    }
    case OpKind::Ternary:
      return false;
    default:
      if (!applies(c, a)) return false;
      return a.kind == OpKind::AllReduce || a.kind == OpKind::Barrier ? allReduceAlone(c, a, level, r)
                                                                     : plannedAlone(c, a, level, r);
  }
}

}  // namespace tern
