// The C API's communicators: the registry of live ones, which threads are
// inside a call on one (so that destroy and abort free nothing a call still
// uses), their creation, destruction and queries, and the calling thread's
// last failure (ternGetLastError; base/error.h says how errors travel).
// Calls that launch work: api.cc.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "api/group.h"
#include "comm/comm.h"
#include "comm/config.h"
#include "comm/env_init.h"
#include "base/asymmetric_fence.h"
#include "base/dtype.h"
#include "base/error.h"

using namespace tern;

namespace tern {
struct CallSlot {  // one per thread that has made a call (InCall, below)
  std::atomic<const ternComm*> comm{nullptr};
  std::atomic<bool> taken{true};
  CallSlot* next = nullptr;
};
}  // namespace tern

namespace {

std::mutex registryMu;
std::unordered_set<const ternComm*> registry;  // live communicators
// Bumped (under registryMu) whenever a communicator leaves the registry.
std::atomic<uint64_t> registryGen{0};
// Which communicator each thread is inside a call on, for ternCommDestroy
// to wait for: a blocking call enters with one store to its thread's slot
// and leaves with another, where the registry's lock, its hash lookup and
// the communicator's caller count took four atomic read-modify-writes and
// ~110 instructions of an 8-byte allreduce's ~1,800 (perf/RESULTS.md,
// 2026-12-01: the small path at the cache-line floor).  The
// slot is stored before the liveness check (isLive) and unregister bumps the
// generation before it reads the slots (deleteWhenUnused), so either the
// call sees the communicator gone or its destroyer sees the call.  The
// fences between are asymmetric (base/asymmetric_fence.h): the call's a
// compiler barrier, the destroyer's a membarrier.  A seq_cst store there
// (an xchg, a full barrier) cost every call 3-5 ns (perf/call_cost,
// interleaved: 0.69-0.93x without it; perf/RESULTS.md, 2026-12-02: small-path
// latency against the tuned OpenMPI, and why the one-way collectives lose).  Slots are
// never freed: a thread's goes back to the list when the thread ends.
std::atomic<CallSlot*> callSlots{nullptr};

// What a call looks up per thread, in one trivially built object (in a
// shared library each thread_local is a __tls_get_addr call, and one with a
// constructor a guard check besides): the communicator this thread last
// found live and the generation then (while no communicator has left since,
// it still is: a new one at the same address needs the old one gone first,
// which bumps the generation; spares the registry's lock and hash lookup),
// and the thread's call slot.
struct ThreadCall {
  const ternComm* live = nullptr;
  uint64_t gen = 0;
  CallSlot* slot = nullptr;
};
thread_local ThreadCall threadCall;

CallSlot* newSlot() {
  for (CallSlot* s = callSlots.load(std::memory_order_acquire); s; s = s->next) {
    bool expected = false;
    if (s->taken.compare_exchange_strong(expected, true)) return s;
  }
  CallSlot* s = new CallSlot;
  s->next = callSlots.load(std::memory_order_relaxed);
  while (!callSlots.compare_exchange_weak(s->next, s, std::memory_order_release)) {
  }
  return s;
}

// The thread's slot, taken on its first call and given back when it ends.
CallSlot& slotOf(ThreadCall& t) {
  struct GiveBack {
    CallSlot* s;
    ~GiveBack() {
      threadCall.slot = nullptr;
      s->taken.store(false, std::memory_order_release);
    }
  };
  if (!t.slot) {
    t.slot = newSlot();
    static thread_local GiveBack back{t.slot};
  }
  return *t.slot;
}

bool inCall(const ternComm* c) {
  for (CallSlot* s = callSlots.load(std::memory_order_acquire); s; s = s->next)
    if (s->comm.load(std::memory_order_seq_cst) == c) return true;
  return false;
}

bool isLive(const ternComm* c, ThreadCall& t) {
  // A call stores its slot before this load (InCall, fenceLight), and
  // unregister bumps the generation before it reads the slots (fenceHeavy).
  if (c && t.live == c && t.gen == registryGen.load(std::memory_order_seq_cst)) return true;
  std::lock_guard<std::mutex> lk(registryMu);
  if (!registry.count(c)) return false;
  t.live = c, t.gen = registryGen.load(std::memory_order_relaxed);
  return true;
}
bool isLive(const ternComm* c) { return isLive(c, threadCall); }

}  // namespace

namespace tern {

// Why `c` failed, as a thread that asks hears it (empty while it is
// healthy): its first failure's reason; an abort records none.
static std::string failedBecause(ternComm* c) {
  if (c->asyncError.load() == ternSuccess) return {};
  std::string why = c->failureReason();
  return why.empty() ? "the communicator was aborted" : why;
}

ternResult_t commRefused(const InCall& call, ternComm* c) {
  if (!c) return setError(ternInvalidArgument, "comm is NULL");
  if (!call.entered)
    return setError(ternInvalidUsage, "comm is not a live communicator (already destroyed or never created)");
  int e = c->asyncError.load();
  if (e == ternSuccess) return ternSuccess;  // (healthy after all: another thread's failure)
  std::string why = c->failureReason();  // the cause, not the last sentence (no nesting)
  return setError(static_cast<ternResult_t>(e), "the communicator failed earlier (" +
                                                    (why.empty() ? "aborted" : why) +
                                                    "); call ternCommAbort and make a new one");
}

InCall::InCall(Comm* c) : c_(c) {
  ThreadCall& t = threadCall;
  CallSlot& s = slotOf(t);
  if (s.comm.load(std::memory_order_relaxed) == nullptr) {
    s.comm.store(c, std::memory_order_relaxed);
    fenceLight();
    slot_ = &s;
    if (!(entered = isLive(c, t))) leave();
  } else {
    entered = enterComm(c);
  }
}

void InCall::leave() {
  if (slot_) slot_->comm.store(nullptr, std::memory_order_release);
  else if (entered) leaveComm(c_);
  slot_ = nullptr, entered = false;
}

bool enterComm(Comm* c) {
  std::lock_guard<std::mutex> lk(registryMu);
  if (!registry.count(c)) return false;
  c->callers.fetch_add(1);
  return true;
}

void leaveComm(Comm* c) { c->callers.fetch_sub(1); }


}  // namespace tern

extern "C" {

// The calling thread's last failure: every call that returns an error has
// recorded its sentence there (base/error.h), whether it found the failure
// itself or heard it from an operation or a failed communicator.  A thread
// that has recorded none (a watchdog that only polls) hears why `comm`
// failed, if it did.
const char* ternGetLastError(ternComm_t comm) {
  static thread_local std::string copy;
  copy = lastThreadError();
  if (copy.empty() && comm && isLive(comm)) copy = failedBecause(comm);
  return copy.c_str();
}

ternResult_t ternGetVersion(int* version) {
  if (!version) return setError(ternInvalidArgument, "version is NULL");
  *version = TERN_VERSION_CODE;
  return ternSuccess;
}

size_t ternTypeSize(ternDataType_t dt) { return typeSize(dt); }

ternResult_t ternGetUniqueId(ternUniqueId* uniqueId) {
  if (!uniqueId) return setError(ternInvalidArgument, "uniqueId is NULL");
  Config cfg = readConfig();
  IdContents id;
  randomBytes(id.secret.key, sizeof id.secret.key);
  SockAddr bindAddr;
  TERN_CHECK(pickInterface(cfg.ifname, &bindAddr, nullptr));
  TERN_CHECK(startRoot(bindAddr, id.secret, cfg, &id.root));
  encodeId(id, uniqueId);
  return ternSuccess;
}

static ternResult_t registerNew(ternComm_t* comm, int nranks, const IdContents& id, int rank,
                                const ternConfig_t* config) {
  ternComm* c = nullptr;
  TERN_CHECK(commCreate(nranks, rank, id, config, &c));
  std::lock_guard<std::mutex> lk(registryMu);
  registry.insert(c);
  *comm = c;
  return ternSuccess;
}

ternResult_t ternCommInitRank(ternComm_t* comm, int nranks, ternUniqueId commId, int rank) {
  return ternCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ternResult_t ternCommInitRankConfig(ternComm_t* comm, int nranks, ternUniqueId commId, int rank,
                                    const ternConfig_t* config) {
  if (!comm) return setError(ternInvalidArgument, "comm is NULL");
  *comm = nullptr;
  if (nranks < 1) return setError(ternInvalidArgument, "nranks " + std::to_string(nranks) + " < 1");
  if (rank < 0 || rank >= nranks)
    return setError(ternInvalidArgument,
                    "rank " + std::to_string(rank) + " is not in [0, " + std::to_string(nranks) + ")");
  IdContents id;
  TERN_CHECK(decodeId(commId, &id));
  return registerNew(comm, nranks, id, rank, config);
}

ternResult_t ternCommInitFromEnv(ternComm_t* comm) { return ternCommInitFromEnvConfig(comm, nullptr); }

ternResult_t ternCommInitFromEnvConfig(ternComm_t* comm, const ternConfig_t* config) {
  if (!comm) return setError(ternInvalidArgument, "comm is NULL");
  *comm = nullptr;
  EnvJob job;
  TERN_CHECK(jobFromEnv(&job));
  if (job.rank == 0) TERN_CHECK(startEnvRoot(job.id, readConfig()));
  return registerNew(comm, job.nranks, job.id, job.rank, config);
}

// Every operation admitted on the communicator ends first (done, or failed
// within the timeout), then the requests nobody waited on are released.
static void finishOutstanding(ternComm_t comm) {
  comm->engine->drain();
  releaseRequestsOf(comm);
}

// Frees a communicator once no other thread is inside a call on it (their
// operations have completed: they only have to return).
static void deleteWhenUnused(ternComm_t comm) {
  fenceHeavy();  // a call that read the generation before unregister bumped it shows its slot now
  while (comm->callers.load() > 0 || inCall(comm)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  delete comm;
}

static ternResult_t unregister(ternComm_t comm) {
  if (!comm) return setError(ternInvalidArgument, "comm is NULL");
  std::lock_guard<std::mutex> lk(registryMu);
  if (!registry.erase(comm))
    return setError(ternInvalidUsage,
                    "comm is not a live communicator (already destroyed or never created)");
  registryGen.fetch_add(1, std::memory_order_seq_cst);  // every thread's ThreadCall.live is stale now
  return ternSuccess;
}

ternResult_t ternCommDestroy(ternComm_t comm) {
  TERN_CHECK(unregister(comm));
  finishOutstanding(comm);
  ternResult_t r = comm->hearOwed();  // the last rooted calls' checks
  deleteWhenUnused(comm);
  return r;
}

ternResult_t ternCommAbort(ternComm_t comm) {
  TERN_CHECK(unregister(comm));
  comm->aborted.store(true);
  comm->fail(ternRemoteError);  // wake peers: our sockets close now
  finishOutstanding(comm);      // in-flight operations fail at once
  deleteWhenUnused(comm);
  return ternSuccess;
}

ternResult_t ternCommGetAsyncError(ternComm_t comm, ternResult_t* asyncError) {
  if (!asyncError) return setError(ternInvalidArgument, "asyncError is NULL");
  if (!comm) return setError(ternInvalidArgument, "comm is NULL");
  InCall call(comm);
  if (!call.entered) return setError(ternInvalidUsage, "comm is not a live communicator");
  ternResult_t e = static_cast<ternResult_t>(comm->asyncError.load());
  *asyncError = e != ternSuccess ? e : comm->engine->idle() ? ternSuccess : ternInProgress;
  if (e != ternSuccess) setThreadError(failedBecause(comm));  // the failure it reports is this thread's now
  return ternSuccess;
}

// Queries that work on a failed communicator too: only the pointers are checked.
static ternResult_t checkQuery(const InCall& call, const ternComm* comm, const void* out,
                               const char* name) {
  if (!out) return setError(ternInvalidArgument, std::string(name) + " is NULL");
  if (!call.entered)
    return setError(comm ? ternInvalidUsage : ternInvalidArgument, "comm is not a live communicator");
  return ternSuccess;
}

ternResult_t ternCommCount(const ternComm_t comm, int* count) {
  InCall call(comm);
  TERN_CHECK(checkQuery(call, comm, count, "count"));
  *count = comm->nranks;
  return ternSuccess;
}

ternResult_t ternCommUserRank(const ternComm_t comm, int* rank) {
  InCall call(comm);
  TERN_CHECK(checkQuery(call, comm, rank, "rank"));
  *rank = comm->rank;
  return ternSuccess;
}

ternResult_t ternCommRingOrder(const ternComm_t comm, int* ranks) {
  InCall call(comm);
  if (!ranks) return setError(ternInvalidArgument, "ranks is NULL");
  TERN_CHECK(checkLiveComm(call, comm));
  std::copy(comm->ring.begin(), comm->ring.end(), ranks);
  return ternSuccess;
}

const char* ternCommPeerTransport(const ternComm_t comm, int peer) {
  InCall call(comm);
  if (!call.entered || peer < 0 || peer >= comm->nranks) return nullptr;
  return comm->transportName(peer);
}

ternResult_t ternCommGetStats(const ternComm_t comm, ternCommStats_t* stats) {
  InCall call(comm);
  TERN_CHECK(checkQuery(call, comm, stats, "stats"));
  *stats = {};
  uint64_t sent, recv;
  comm->wireBytes(&sent, &recv);
  stats->bytesSent = sent;
  stats->bytesRecv = recv;
  stats->ops = comm->engine->opsDone();
  return ternSuccess;
}

ternResult_t ternCommGetFlowStats(const ternComm_t comm, ternFlowStats_t* stats) {
  InCall call(comm);
  TERN_CHECK(checkQuery(call, comm, stats, "stats"));
  if (stats->size < offsetof(ternFlowStats_t, flowClasses))
    return setError(ternInvalidArgument,
                    "stats->size " + std::to_string(stats->size) +
                        " is too small for a ternFlowStats_t (set it to sizeof(ternFlowStats_t))");
  ternFlowStats_t all{};
  all.size = std::min(stats->size, sizeof all);
  all.flowClasses = comm->cfg.flowClasses;
  std::copy(comm->cfg.dscp, comm->cfg.dscp + TERN_PRIORITY_LEVELS, all.dscp);
  uint64_t sent[TERN_PRIORITY_LEVELS], recv[TERN_PRIORITY_LEVELS];
  comm->wireBytesByClass(sent, recv);
  std::copy(sent, sent + TERN_PRIORITY_LEVELS, all.bytesSent);
  std::copy(recv, recv + TERN_PRIORITY_LEVELS, all.bytesRecv);
  memcpy(stats, &all, all.size);  // an older, smaller struct gets what it has room for
  return ternSuccess;
}

}  // extern "C"
