// Which allreduce algorithm a call runs: one pure function of facts every
// rank has alike (the call's size, TERN_ALGO, which every rank's must equal,
// checked at init; the threshold; the host layout), so the ranks of a call
// always plan it the same way.
//
// - Up to TERN_SMALL_THRESHOLD bytes: recursive doubling, whatever TERN_ALGO
//   says.  The small path (api/alone.cc) runs that schedule without asking,
//   and a rank whose engine was busy must meet its peers' bytes with the
//   same plan; so a forced algorithm applies above the threshold
//   (TERN_SMALL_THRESHOLD=0 forces it at every size).
// - TERN_ALGO=ring|rd|twolevel: that one.
// - auto: two-level when there are several hosts, every host has more than
//   one rank (with one rank on a host the scheme saves nothing there: that
//   host's NIC carries 2(H-1)/H of the buffer either way) and the call has
//   at least kTwoLevelFromBytes; else the ring.
// A cost model fitted per machine (issue 45) is to replace the auto rule.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/log.h"
#include "collectives/collectives.h"
#include "topology/hosts.h"

namespace tern {

AllReduceAlgo chooseAllReduce(const AllReduceFacts& f) {
  if (f.bytes <= f.smallBytes) return AllReduceAlgo::RecursiveDoubling;
  if (!strcmp(f.forced, "rd")) return AllReduceAlgo::RecursiveDoubling;
  if (!strcmp(f.forced, "ring")) return AllReduceAlgo::Ring;
  if (!strcmp(f.forced, "twolevel")) return AllReduceAlgo::TwoLevel;
  if (f.hosts > 1 && f.minLocal > 1 && f.bytes >= kTwoLevelFromBytes) return AllReduceAlgo::TwoLevel;
  return AllReduceAlgo::Ring;
}

const char* algoName(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::RecursiveDoubling: return "recursive doubling";
    case AllReduceAlgo::Ring: return "ring";
    case AllReduceAlgo::TwoLevel: return "two-level";
  }
  return "?";
}

AllReduceFacts allReduceFacts(const PlanCtx& x, size_t bytes) {
  AllReduceFacts f;
  f.forced = x.cfg->algo.c_str();
  f.bytes = bytes;
  f.smallBytes = x.cfg->smallBytes;
  f.nranks = x.nranks;
  f.hosts = x.hosts ? x.hosts->hosts() : 1;
  f.minLocal = x.hosts ? x.hosts->minLocal() : x.nranks;
  return f;
}

namespace {

// The first call of each algorithm in the process is logged at INFO (a
// training loop makes thousands of calls: the rest at TRACE).
void announce(AllReduceAlgo a, const AllReduceFacts& f) {
  static std::atomic<unsigned> seen{0};
  const unsigned bit = 1u << static_cast<unsigned>(a);
  if (!(seen.fetch_or(bit, std::memory_order_relaxed) & bit))
    TERN_LOG(Info, "allreduce of %zu bytes: %s (TERN_ALGO=%s, %d hosts, fewest ranks on a host %d); "
             "later choices at TRACE", f.bytes, algoName(a), f.forced, f.hosts, f.minLocal);
  else
    TERN_LOG(Trace, "allreduce of %zu bytes: %s", f.bytes, algoName(a));
}

}  // namespace

bool allReduceNeedsDivide(const PlanCtx& x, size_t count, ternDataType_t dt, ternRedOp_t op) {
  return op == ternAvg && x.nranks > 1 &&
         chooseAllReduce(allReduceFacts(x, count * typeSize(dt))) == AllReduceAlgo::RecursiveDoubling;
}

void planAllReduce(const PlanCtx& x, const void* src, void* dst, size_t count, ternDataType_t dt,
                   ternRedOp_t op, Phase* ph) {
  ph->what = "allreduce";
  if (x.nranks == 1) {
    if (src != dst) x.mem->copy(dst, src, count * typeSize(dt));
    return;
  }
  const AllReduceFacts f = allReduceFacts(x, count * typeSize(dt));
  const AllReduceAlgo a = chooseAllReduce(f);
  if (a != AllReduceAlgo::RecursiveDoubling) announce(a, f);
  switch (a) {
    case AllReduceAlgo::RecursiveDoubling:
      return planAllReduceRecursiveDoubling(x, src, dst, count, dt, op, ph);
    case AllReduceAlgo::Ring:
      return planAllReduceRing(x, src, dst, count, dt, op, ph);
    case AllReduceAlgo::TwoLevel:
      if (x.hosts) return planAllReduceTwoLevel(x, src, dst, count, dt, op, ph);
      // A context without a layout (a test's simulated ranks) is one host.
      PlanCtx one = x;
      const HostLayout all = groupByHost(std::vector<uint64_t>(x.nranks, 0));
      one.hosts = &all;
      return planAllReduceTwoLevel(one, src, dst, count, dt, op, ph);
  }
}

}  // namespace tern
