// Which algorithm an allreduce or an allgather runs: one pure function of
// facts every rank has alike (the call's size, TERN_ALGO, which every rank's
// must equal, checked at init; the threshold; the host layout), so the ranks
// of a call always plan it the same way.
//
// Allreduce:
// - Up to TERN_SMALL_THRESHOLD bytes: recursive doubling, whatever TERN_ALGO
//   says.  The small path (comm/inline_calls.cc) runs that schedule without asking,
//   and a rank whose engine was busy must meet its peers' bytes with the
//   same plan; so a forced algorithm applies above the threshold
//   (TERN_SMALL_THRESHOLD=0 forces it at every size).
// - TERN_ALGO=ring|rd|twolevel: that one.
// - auto: two-level when there are several hosts, every host has more than
//   one rank and the call has at least kTwoLevelFromBytes; else the ring.
//   (Uneven hosts such as 3+1 send fewer bytes two-level too, 2(H-1)/H of
//   the buffer per NIC, but a rank alone on its host then runs every
//   segment's ring in turn; not measured, so auto leaves them on the ring.
//   With one rank per host two-level is the flat ring.)
// Allgather (the small path plans it as the engine does, so no threshold
// binds it): the ring, or two-level where every host has as many ranks
// (forced, or under auto as above from kTwoLevelAllGatherFromBytes of
// output); uneven hosts fall back to the ring; rd means the ring.
// The ternary allreduce (chooseTernaryTwoLevel): two levels under auto and
// twolevel where every host has as many ranks, more than one, unless it
// clips (sigma is per rank; the host sum would need its own); ring and rd
// keep it flat.  Uneven hosts stay flat: the rails would differ in count.
// With TERN_MODEL_FILE (every rank's the same, checked at init) auto asks
// the cost model instead for an allreduce above the threshold: the dense
// algorithm it predicts fastest at this size, host layout and link
// (model/collective_model.h, choose).  The allgather keeps its rule: the
// model has no allgather yet.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/log.h"
#include "collectives/collectives.h"
#include "model/collective_model.h"
#include "topology/hosts.h"

namespace tern {

namespace {

// The cost model's choice for an allreduce of f.bytes (above the threshold).
Algo modelChoice(const AlgoFacts& f) {
  model::Call call;
  call.bytes = static_cast<double>(f.bytes);
  call.layout = f.minLocal == f.maxLocal ? model::evenLayout(f.hosts, f.minLocal)
                                         : model::spreadLayout(f.nranks, f.hosts);
  call.net = f.ucx ? model::Link::Ucx : model::Link::Tcp;
  model::Limits lim;
  lim.smallBytes = static_cast<double>(f.smallBytes);
  switch (model::choose(call, false, *f.model, lim).algo) {
    case model::Algo::TwoLevel: return Algo::TwoLevel;
    case model::Algo::Ring: return Algo::Ring;
    default: return Algo::RecursiveDoubling;  // the small path's or the engine's: one schedule
  }
}

}  // namespace

Algo chooseAlgo(const AlgoFacts& f) {
  const bool severalEach = f.hosts > 1 && f.minLocal > 1;
  if (f.kind == OpKind::AllGather) {
    const bool even = f.minLocal == f.maxLocal;
    if (!even || !strcmp(f.forced, "ring") || !strcmp(f.forced, "rd")) return Algo::Ring;
    if (!strcmp(f.forced, "twolevel")) return Algo::TwoLevel;
    return severalEach && f.bytes >= kTwoLevelAllGatherFromBytes ? Algo::TwoLevel : Algo::Ring;
  }
  if (f.bytes <= f.smallBytes) return Algo::RecursiveDoubling;
  if (!strcmp(f.forced, "rd")) return Algo::RecursiveDoubling;
  if (!strcmp(f.forced, "ring")) return Algo::Ring;
  if (!strcmp(f.forced, "twolevel")) return Algo::TwoLevel;
  if (f.model) return modelChoice(f);
  return severalEach && f.bytes >= kTwoLevelFromBytes ? Algo::TwoLevel : Algo::Ring;
}

bool chooseTernaryTwoLevel(const AlgoFacts& f, bool clip) {
  if (clip || !strcmp(f.forced, "ring") || !strcmp(f.forced, "rd")) return false;
  return f.hosts > 1 && f.minLocal == f.maxLocal && f.minLocal > 1;
}

const char* algoName(Algo a) {
  switch (a) {
    case Algo::RecursiveDoubling: return "recursive doubling";
    case Algo::Ring: return "ring";
    case Algo::TwoLevel: return "two-level";
  }
  return "?";
}

AlgoFacts algoFacts(const PlanCtx& x, OpKind kind, size_t bytes) {
  AlgoFacts f;
  f.kind = kind;
  f.forced = x.cfg->algo.c_str();
  f.bytes = bytes;
  f.smallBytes = x.cfg->smallBytes;
  f.nranks = x.nranks;
  f.hosts = x.hosts ? x.hosts->hosts() : 1;
  f.minLocal = x.hosts ? x.hosts->minLocal() : x.nranks;
  f.maxLocal = x.hosts ? x.hosts->maxLocal() : x.nranks;
  f.model = x.model;
  f.ucx = x.cfg->transport == "ucx" || x.cfg->net == "ucx";
  return f;
}

namespace {

// The first call of each kind and algorithm in the process is logged at INFO
// (a training loop makes thousands of calls: the rest at TRACE).
void announce(Algo a, const AlgoFacts& f) {
  static std::atomic<unsigned> seen{0};
  const char* what = f.kind == OpKind::AllGather ? "allgather" : "allreduce";
  const unsigned bit = 1u << (static_cast<unsigned>(a) + (f.kind == OpKind::AllGather ? 4 : 0));
  if (!(seen.fetch_or(bit, std::memory_order_relaxed) & bit))
    TERN_LOG(Info, "%s of %zu bytes: %s (TERN_ALGO=%s, %d hosts of %d-%d ranks); later choices at TRACE",
             what, f.bytes, algoName(a), f.forced, f.hosts, f.minLocal, f.maxLocal);
  else
    TERN_LOG(Trace, "%s of %zu bytes: %s", what, f.bytes, algoName(a));
}

// x, or x with every rank on one host where it has no layout (a test's
// simulated ranks), for a two-level plan.
template <class Plan>
void withHosts(const PlanCtx& x, Plan plan) {
  if (x.hosts) return plan(x);
  PlanCtx one = x;
  const HostLayout all = groupByHost(std::vector<uint64_t>(x.nranks, 0));
  one.hosts = &all;
  plan(one);
}

}  // namespace

bool allReduceNeedsDivide(const PlanCtx& x, size_t count, ternDataType_t dt, ternRedOp_t op) {
  return op == ternAvg && x.nranks > 1 &&
         chooseAlgo(algoFacts(x, OpKind::AllReduce, count * typeSize(dt))) == Algo::RecursiveDoubling;
}

void planAllReduce(const PlanCtx& x, const void* src, void* dst, size_t count, ternDataType_t dt,
                   ternRedOp_t op, Phase* ph) {
  ph->what = "allreduce";
  if (x.nranks == 1) {
    if (src != dst) x.mem->copy(dst, src, count * typeSize(dt));
    return;
  }
  const AlgoFacts f = algoFacts(x, OpKind::AllReduce, count * typeSize(dt));
  const Algo a = chooseAlgo(f);
  if (a != Algo::RecursiveDoubling) announce(a, f);
  switch (a) {
    case Algo::RecursiveDoubling:
      return planAllReduceRecursiveDoubling(x, src, dst, count, dt, op, ph);
    case Algo::Ring:
      return planAllReduceRing(x, src, dst, count, dt, op, ph);
    case Algo::TwoLevel:
      return withHosts(x, [&](const PlanCtx& y) { planAllReduceTwoLevel(y, src, dst, count, dt, op, ph); });
  }
}

namespace {

Algo allGatherAlgo(const PlanCtx& x, size_t bytesPerRank, AlgoFacts* f) {
  *f = algoFacts(x, OpKind::AllGather, bytesPerRank * x.nranks);
  return x.nranks > 1 ? chooseAlgo(*f) : Algo::Ring;
}

}  // namespace

int allGatherPhases(const PlanCtx& x, size_t bytesPerRank) {
  // Blocks too small for two pieces are one phase whatever the algorithm:
  // known without choosing it (the small path asks for every call).
  if (model::overlapPieces(static_cast<double>(bytesPerRank), static_cast<double>(x.cfg->chunkBytes)) == 1) return 1;
  AlgoFacts f;
  if (allGatherAlgo(x, bytesPerRank, &f) != Algo::TwoLevel) return 1;
  int pieces = 1;
  withHosts(x, [&](const PlanCtx& y) { pieces = allGatherTwoLevelPieces(y, bytesPerRank); });
  return pieces == 1 ? 1 : pieces + 1;
}

void planAllGather(const PlanCtx& x, const void* src, void* dst, size_t bytesPerRank, Phase* ph, int phase) {
  AlgoFacts f;
  const Algo a = allGatherAlgo(x, bytesPerRank, &f);
  if (a != Algo::TwoLevel) return planAllGatherRing(x, src, dst, bytesPerRank, ph);
  if (phase == 0) announce(a, f);
  withHosts(x, [&](const PlanCtx& y) { planAllGatherTwoLevel(y, src, dst, bytesPerRank, ph, phase); });
}

}  // namespace tern
