// ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd.  Calls inside a
// group are checked when made and queued; the outermost ncclGroupEnd runs
// the queued communicator inits side by side (so one thread can make several
// ranks' communicators, as ncclCommInitAll does), then the queued operations
// as one tern group.
#include <thread>

#include "nccl_shim/shim.h"

namespace shim {
namespace {

struct Queued {
  ncclComm_t comm;
  std::function<ternResult_t()> run;
};

struct GroupState {
  int depth = 0;
  std::vector<Queued> ops;
  std::vector<std::function<void()>> inits;
};
thread_local GroupState tls;

void runInits(std::vector<std::function<void()>> inits) {
  if (inits.size() == 1) return inits[0]();
  std::vector<std::thread> threads;  // every rank's init waits for the others
  for (auto& f : inits) threads.emplace_back(std::move(f));
  for (auto& t : threads) t.join();
}

// The queued operations as one tern group; the first failure is the result.
ncclResult_t runOps(std::vector<Queued> ops) {
  if (ops.empty()) return ncclSuccess;
  ternGroupStart();
  ncclResult_t first = ncclSuccess;
  for (auto& q : ops) {
    ncclResult_t r = fromTern(q.comm, q.run());
    if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
  }
  ncclComm_t anyComm = ops.front().comm;
  ncclResult_t end = fromTern(anyComm, ternGroupEnd());  // always closes tern's group
  return first != ncclSuccess ? first : end;
}

}  // namespace

bool inGroup() { return tls.depth > 0; }

void deferInit(std::function<void()> init) { tls.inits.push_back(std::move(init)); }

ncclResult_t submit(ncclComm_t comm, std::function<ternResult_t()> op) {
  if (inGroup()) {
    tls.ops.push_back({comm, std::move(op)});
    return ncclSuccess;
  }
  return fromTern(comm, op());
}

// Ends the outermost group: inits first (operations may use those comms).
ncclResult_t endGroup(bool launch) {
  if (tls.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart is open");
  if (--tls.depth > 0) return ncclSuccess;
  std::vector<Queued> ops = std::move(tls.ops);
  std::vector<std::function<void()>> inits = std::move(tls.inits);
  tls.ops.clear();
  tls.inits.clear();
  runInits(std::move(inits));
  return launch ? runOps(std::move(ops)) : ncclSuccess;
}

}  // namespace shim

NCCL_SHIM_API(ncclResult_t, ncclGroupStart) {
  ++shim::tls.depth;
  return shim::traced(nullptr, ncclSuccess, "ncclGroupStart(depth=%d)", shim::tls.depth);
}

NCCL_SHIM_API(ncclResult_t, ncclGroupEnd) {
  return shim::traced(nullptr, shim::endGroup(true), "ncclGroupEnd");
}

// NCCL plans the group, reports its estimated time and launches nothing.
// tern has no cost model for a group, so estimatedTime stays NCCL_UNDEF_FLOAT
// ("not estimated"); the queued operations are dropped as NCCL drops them.
NCCL_SHIM_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  const char* what = "ncclGroupSimulateEnd";
  ncclResult_t r = ncclSuccess;
  if (!simInfo) {
    r = shim::fail(ncclInvalidArgument, "%s: simInfo is NULL", what);
  } else if (simInfo->magic != 0x74685283u || simInfo->size < sizeof(ncclSimInfo_t)) {
    r = shim::fail(ncclInvalidArgument, "%s: simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER",
                   what);
  }
  if (r != ncclSuccess) return shim::traced(nullptr, r, "%s", what);
  simInfo->estimatedTime = NCCL_UNDEF_FLOAT;
  return shim::traced(nullptr, shim::endGroup(false), "%s", what);
}
