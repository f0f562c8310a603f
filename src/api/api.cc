// The C API: argument checks, then an Operation for the communicator's
// executor (or for the open group).  Every failure returns a ternResult_t
// with a sentence for ternGetLastError; nothing aborts the caller.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "api/alone.h"
#include "api/group.h"
#include "api/premul.h"
#include "collectives/collectives.h"
#include "collectives/ternary.h"
#include "comm/comm.h"
#include "comm/config.h"
#include "comm/env_init.h"
#include "base/asymmetric_fence.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/log.h"
#include "memory/buffer_kind.h"

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

// Records an API-level failure both for the thread and on the communicator.
ternResult_t fail(ternComm* c, ternResult_t code, const std::string& msg) {
  setError(code, msg);
  if (c && isLive(c)) c->setLastError(msg);
  return code;
}

// Why a communicator cannot be used (checkComm found it so).
[[gnu::noinline, gnu::cold]] ternResult_t commRefused(const InCall& call, ternComm* c) {
  if (!c) return fail(nullptr, ternInvalidArgument, "comm is NULL");
  if (!call.entered)
    return fail(nullptr, ternInvalidUsage,
                "comm is not a live communicator (already destroyed or never created)");
  int e = c->asyncError.load();
  if (e == ternSuccess) return ternSuccess;  // (healthy after all: another thread's failure)
  std::string why = c->failureReason();  // the cause, not the last sentence (no nesting)
  return fail(c, static_cast<ternResult_t>(e),
              "the communicator failed earlier (" + (why.empty() ? "aborted" : why) +
                  "); call ternCommAbort and make a new one");
}

// Every call's first check, inline, on a communicator the call has entered
// (`call`, made first thing in every API function: from then on ternCommAbort
// on another thread waits for the call to return before it frees anything,
// so the checks' reads of the communicator cannot meet a freed one); the
// sentences are commRefused's.
inline ternResult_t checkComm(const InCall& call, ternComm* c) {
  if (__builtin_expect(call.entered && c->asyncError.load() == ternSuccess, 1)) return ternSuccess;
  return commRefused(call, c);
}

#ifdef TERN_WITH_CUDA
const char* const kNoDeviceWhy = "no driver or no device";
#else
const char* const kNoDeviceWhy = "libtern was built without CUDA";
#endif

[[gnu::noinline, gnu::cold]] ternResult_t argsRefused(ternComm* c, const void* buf, const void* buf2,
                                                      size_t count, ternDataType_t dt, ternStream_t stream,
                                                      const char* what) {
  if (static_cast<int>(dt) < 0 || dt >= ternNumTypes)
    return fail(c, ternInvalidArgument,
                std::string(what) + ": datatype " + std::to_string(dt) + " is not a ternDataType_t");
  size_t all;
  if (__builtin_mul_overflow(count, 8 * static_cast<size_t>(c->nranks), &all))
    return fail(c, ternInvalidArgument, std::string(what) + ": count is too large");
  if (count > 0 && (!buf || !buf2))
    return fail(c, ternInvalidArgument, std::string(what) + ": a buffer is NULL but count is " +
                                            std::to_string(count));
  if (stream && !deviceMemoryUsable())
    return fail(c, ternInvalidArgument,
                std::string(what) + ": stream is not NULL but this process has no usable CUDA "
                                    "device (" + kNoDeviceWhy +
                                    "), so its buffers cannot be device memory: pass host "
                                    "buffers and a NULL stream");
  return ternSuccess;
}

// The common case inline (a host call with sane arguments: no division,
// no string); anything else, with its sentence, is argsRefused's.  The count
// bound: every rank's share of the largest element type fits a size_t.
ternResult_t checkArgs(const InCall& call, ternComm* c, const void* buf, const void* buf2, size_t count,
                       ternDataType_t dt, ternStream_t stream, const char* what) {
  TERN_CHECK(checkComm(call, c));
  size_t all;
  if (__builtin_expect(static_cast<unsigned>(dt) < static_cast<unsigned>(ternNumTypes) &&
                           !__builtin_mul_overflow(count, 8 * static_cast<size_t>(c->nranks), &all) &&
                           (count == 0 || (buf && buf2)) && !stream,
                       1))
    return ternSuccess;
  return argsRefused(c, buf, buf2, count, dt, stream, what);
}

ternResult_t checkOp(ternComm* c, ternRedOp_t op, const char* what) {
  if (static_cast<int>(op) < 0 || op >= ternNumOps)
    return fail(c, ternInvalidArgument,
                std::string(what) + ": op " + std::to_string(op) + " is not a ternRedOp_t");
  return ternSuccess;
}

// A built-in op, or one of c's PreMulSum ops made for datatype dt.
ternResult_t checkOpOrPreMulSum(ternComm* c, ternRedOp_t op, ternDataType_t dt, const char* what) {
  if (static_cast<int>(op) < ternNumOps) return checkOp(c, op, what);
  ternDataType_t made;
  if (!isPreMulSum(c, op, &made))
    return fail(c, ternInvalidArgument,
                std::string(what) + ": op " + std::to_string(op) +
                    " is neither a ternRedOp_t nor a live ternRedOpCreatePreMulSum op of this "
                    "communicator");
  if (made != dt)
    return fail(c, ternInvalidArgument,
                std::string(what) + ": op " + std::to_string(op) + " was made for datatype " +
                    std::to_string(made) + " but the call's datatype is " + std::to_string(dt));
  return ternSuccess;
}

[[gnu::noinline, gnu::cold]] ternResult_t rankRefused(ternComm* c, int r, const char* role, const char* what) {
  return fail(c, ternInvalidArgument, std::string(what) + ": " + role + " " + std::to_string(r) +
                                          " is not in [0, " + std::to_string(c->nranks) + ")");
}

inline ternResult_t checkRank(ternComm* c, int r, const char* role, const char* what) {
  if (__builtin_expect(static_cast<unsigned>(r) < static_cast<unsigned>(c->nranks), 1)) return ternSuccess;
  return rankRefused(c, r, role, what);
}

// The operation the arguments describe, at the calling thread's priority.
// `op` comes from the communicator's pool, usually with its dense task, which
// makeTask sets up again in place (no allocation on the small-call path).

// The buffers a call on a stream reads or writes on this rank (a root's
// other buffer only on the root), with the names the API gives them.
int usedBuffers(const ternComm* c, const CollArgs& a, BufferKind* out, const void** ptrs) {
  const bool root = c->rank == a.root;
  bool src = a.src && a.kind != OpKind::Recv, dst = a.dst && a.kind != OpKind::Send;
  if ((a.kind == OpKind::Broadcast || a.kind == OpKind::Scatter) && !root) src = false;
  if ((a.kind == OpKind::Reduce || a.kind == OpKind::Gather) && !root) dst = false;
  int n = 0;
  if (src) ptrs[n] = a.src, out[n++].name = "sendbuff";
  if (dst) ptrs[n] = a.dst, out[n++].name = "recvbuff";
  return n;
}

// The memory type and device of a call's buffers on a stream, or a refusal
// with a sentence (host memory, a mix, two devices).
ternResult_t streamBuffers(ternComm* c, const CollArgs& a, const char* what, MemType* type,
                           int* device) {
  BufferKind kinds[2];
  const void* ptrs[2];
  int dev[2] = {-1, -1};
  const int n = usedBuffers(c, a, kinds, ptrs);
  for (int i = 0; i < n; ++i) kinds[i].kind = bufferKind(ptrs[i], &dev[i]);
  std::string why;
  if (n == 2 && !memTypeForBuffers({kinds[0], kinds[1]}, type, &why))
    return fail(c, ternInvalidArgument, std::string(what) + ": " + why);
  if (n == 2 && dev[0] != dev[1])
    return fail(c, ternInvalidArgument,
                std::string(what) + ": sendbuff is on device " + std::to_string(dev[0]) +
                    " but recvbuff on device " + std::to_string(dev[1]));
  *type = n ? kinds[0].kind : MemType::Host;
  *device = dev[0];
  if (*type == MemType::Host)
    return fail(c, ternInvalidArgument,
                std::string(what) + ": stream is not NULL but " + (n ? kinds[0].name : "the buffer") +
                    " is host memory: pass a NULL stream for host buffers, device memory with a "
                    "stream");
  return ternSuccess;
}

// A call on a stream: its buffers must all be device memory (or, in tests,
// the simulated device's: memory/simulated.h).  Its memory operations are
// made here and begun on the caller's thread, so the operation sits in the
// stream's order (memory.h, "Async contract"): it starts once the work
// enqueued before this call is done, and work enqueued after it waits.
// Inside a group they are begun at the group's end (group.cc), as NCCL
// does: a send and a recv of one group on one stream must not wait for
// each other's hold.
ternResult_t streamOps(ternComm* c, const CollArgs& a, ternStream_t stream, const char* what,
                       std::unique_ptr<MemOps>* mem) {
  MemType type;
  int device;
  TERN_CHECK(streamBuffers(c, a, what, &type, &device));
  *mem = makeStreamOps(type, stream, device);
  if (!*mem)
    return fail(c, ternUnhandledCudaError,
                std::string(what) + ": could not set up the device operation (no work stream)");
  if (groupOpen()) return ternSuccess;
  (*mem)->begin();
  if ((*mem)->error() != ternSuccess)
    return fail(c, (*mem)->error(), std::string(what) + ": " + (*mem)->lastError());
  return ternSuccess;
}

// The communicator's ternary allreduce state, made on first use from the
// options resolved at init (collectives/ternary.h).
TernaryState& ternaryOf(ternComm* c) { return ternaryState(c->attached, c->cfg.ternary); }

// Runs an operation now, or adds it to the open group.  With a stream (device
// buffers) it is only enqueued: the call returns, and a failure shows up as
// the communicator's asynchronous error.
ternResult_t launch(const InCall& call, ternComm* c, CollArgs args, ternStream_t stream = nullptr,
                    std::unique_ptr<Task> task = nullptr) {
  std::unique_ptr<MemOps> mem;
  if (stream) TERN_CHECK(streamOps(c, args, stream, collectiveKind(args.kind).name, &mem));
  // A send or receive of an open group is only recorded (runRecorded
  // enters the communicator again at the group's end).
  ternResult_t alone;
  const bool p2p = args.kind == OpKind::Send || args.kind == OpKind::Recv;
  if (!stream && !task && p2p && recordInGroup(c, args, &alone)) return alone;
  if (!stream && !task && callAlone(c, args, &alone)) return alone;
  OpPtr op = c->engine->newOperation();
  op->streamMem = std::move(mem);
  std::string why;
  ternResult_t r = static_cast<int>(args.op) >= ternNumOps ? setUpPreMulSum(c, &args, *op, &why)
                                                            : ternSuccess;
  if (r != ternSuccess) return fail(c, r, std::string(collectiveKind(args.kind).name) + ": " + why);
  makeOp(c, op, args, std::move(task), currentPriority());
  return launchOp(c, std::move(op));
}

}  // namespace

namespace tern {

OpDesc callDesc(const Comm* c, const CollArgs& args, int level) {
  OpDesc d;
  d.magic = kDescMagic;
  d.kind = collectiveKind(args.kind).id;
  d.dtype = static_cast<uint8_t>(args.dt);
  d.redop = static_cast<uint8_t>(args.op);
  d.level = static_cast<uint8_t>(level);
  d.root = args.root;
  d.rank = c->rank;
  d.count = args.count;
  return d;
}

void makeOp(Comm* c, const OpPtr& op, const CollArgs& args, std::unique_ptr<Task> task, int level) {
  op->level = level;
  op->collective = args.kind != OpKind::Send && args.kind != OpKind::Recv;
  op->peer = op->collective ? -1 : args.root;
  op->send = args.kind == OpKind::Send;
  op->anySource = args.source != nullptr;
  op->source = args.source;
  op->desc = callDesc(c, args, op->level);
  op->task = task ? std::move(task) : makeTask(args, std::move(op->task));
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

ternResult_t checkLiveComm(const InCall& call, Comm* c) { return checkComm(call, c); }
ternResult_t failOn(Comm* c, ternResult_t code, const std::string& msg) { return fail(c, code, msg); }

}  // namespace tern

extern "C" {

// The newer of the communicator's last failure and the calling thread's:
// a comm-less call (ternGroupEnd, ternSetPriority, ...) that fails after the
// communicator's last failure is what this thread hears about.  Every path
// that returns an error records it in one of the two (setError, fail(),
// ternComm::failWith), so nothing here needs to know the paths.
const char* ternGetLastError(ternComm_t comm) {
  static thread_local std::string copy;
  uint64_t commStamp = 0;
  std::string commMsg = (comm && isLive(comm)) ? comm->getLastError(&commStamp) : std::string();
  copy = commStamp > lastThreadErrorStamp() ? commMsg : lastThreadError();
  return copy.c_str();
}

ternResult_t ternGetVersion(int* version) {
  if (!version) return fail(nullptr, ternInvalidArgument, "version is NULL");
  *version = TERN_VERSION_CODE;
  return ternSuccess;
}

size_t ternTypeSize(ternDataType_t dt) { return typeSize(dt); }

ternResult_t ternGetUniqueId(ternUniqueId* uniqueId) {
  if (!uniqueId) return fail(nullptr, ternInvalidArgument, "uniqueId is NULL");
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
  if (!comm) return fail(nullptr, ternInvalidArgument, "comm is NULL");
  *comm = nullptr;
  if (nranks < 1)
    return fail(nullptr, ternInvalidArgument, "nranks " + std::to_string(nranks) + " < 1");
  if (rank < 0 || rank >= nranks)
    return fail(nullptr, ternInvalidArgument, "rank " + std::to_string(rank) +
                                                  " is not in [0, " + std::to_string(nranks) + ")");
  IdContents id;
  TERN_CHECK(decodeId(commId, &id));
  return registerNew(comm, nranks, id, rank, config);
}

ternResult_t ternCommInitFromEnv(ternComm_t* comm) { return ternCommInitFromEnvConfig(comm, nullptr); }

ternResult_t ternCommInitFromEnvConfig(ternComm_t* comm, const ternConfig_t* config) {
  if (!comm) return fail(nullptr, ternInvalidArgument, "comm is NULL");
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
  if (!comm) return fail(nullptr, ternInvalidArgument, "comm is NULL");
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
  if (!asyncError) return fail(comm, ternInvalidArgument, "asyncError is NULL");
  if (!comm) return fail(nullptr, ternInvalidArgument, "comm is NULL");
  InCall call(comm);
  if (!call.entered) return fail(nullptr, ternInvalidUsage, "comm is not a live communicator");
  ternResult_t e = static_cast<ternResult_t>(comm->asyncError.load());
  *asyncError = e != ternSuccess ? e : comm->engine->idle() ? ternSuccess : ternInProgress;
  return ternSuccess;
}

// Queries that work on a failed communicator too: only the pointers are checked.
static ternResult_t checkQuery(const InCall& call, const ternComm* comm, const void* out,
                               const char* name) {
  if (!out) return fail(nullptr, ternInvalidArgument, std::string(name) + " is NULL");
  if (!call.entered)
    return fail(nullptr, comm ? ternInvalidUsage : ternInvalidArgument,
                "comm is not a live communicator");
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
  if (!ranks) return fail(nullptr, ternInvalidArgument, "ranks is NULL");
  TERN_CHECK(checkComm(call, comm));
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
  stats->ops = comm->opsDone.load();
  return ternSuccess;
}

ternResult_t ternCommGetFlowStats(const ternComm_t comm, ternFlowStats_t* stats) {
  InCall call(comm);
  TERN_CHECK(checkQuery(call, comm, stats, "stats"));
  if (stats->size < offsetof(ternFlowStats_t, flowClasses))
    return fail(nullptr, ternInvalidArgument,
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

ternResult_t ternAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ternDataType_t datatype, ternRedOp_t op, ternComm_t comm,
                           ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, count, datatype, stream, "ternAllReduce"));
  TERN_CHECK(checkOpOrPreMulSum(comm, op, datatype, "ternAllReduce"));
  if (count == 0) return ternSuccess;
  return launch(call, comm, collArgs(OpKind::AllReduce, sendbuff, recvbuff, count, datatype, op), stream);
}

ternResult_t ternBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ternDataType_t datatype, int root, ternComm_t comm,
                           ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, recvbuff, recvbuff, count, datatype, stream, "ternBroadcast"));
  TERN_CHECK(checkRank(comm, root, "root", "ternBroadcast"));
  if (comm->rank == root && count > 0 && !sendbuff)
    return fail(comm, ternInvalidArgument, "ternBroadcast: sendbuff is NULL on the root");
  if (count == 0) return ternSuccess;
  return launch(call, comm,
                collArgs(OpKind::Broadcast, sendbuff, recvbuff, count, datatype, ternSum, root),
                stream);
}

ternResult_t ternReduce(const void* sendbuff, void* recvbuff, size_t count,
                        ternDataType_t datatype, ternRedOp_t op, int root, ternComm_t comm,
                        ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, sendbuff, count, datatype, stream, "ternReduce"));
  TERN_CHECK(checkOpOrPreMulSum(comm, op, datatype, "ternReduce"));
  TERN_CHECK(checkRank(comm, root, "root", "ternReduce"));
  if (comm->rank == root && count > 0 && !recvbuff)
    return fail(comm, ternInvalidArgument, "ternReduce: recvbuff is NULL on the root");
  if (count == 0) return ternSuccess;
  return launch(call, comm, collArgs(OpKind::Reduce, sendbuff, recvbuff, count, datatype, op, root),
                stream);
}

ternResult_t ternAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ternDataType_t datatype, ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, sendcount, datatype, stream, "ternAllGather"));
  if (sendcount == 0) return ternSuccess;
  return launch(call, comm, collArgs(OpKind::AllGather, sendbuff, recvbuff, sendcount, datatype), stream);
}

ternResult_t ternAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          ternDataType_t datatype, ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, count, datatype, stream, "ternAllToAll"));
  if (count == 0) return ternSuccess;
  return launch(call, comm, collArgs(OpKind::AllToAll, sendbuff, recvbuff, count, datatype), stream);
}

// Gather and scatter: the root's side holds nranks blocks; the other side one.
static ternResult_t rootedBlocks(const InCall& call, const void* one, const void* many, size_t count,
                                 ternDataType_t datatype, int root, ternComm_t comm,
                                 ternStream_t stream, const char* what, const char* manyName) {
  TERN_CHECK(checkArgs(call, comm, one, one, count, datatype, stream, what));
  TERN_CHECK(checkRank(comm, root, "root", what));
  if (comm->rank == root && count > 0 && !many)
    return fail(comm, ternInvalidArgument,
                std::string(what) + ": " + manyName + " is NULL on the root");
  return ternSuccess;
}

ternResult_t ternGather(const void* sendbuff, void* recvbuff, size_t count,
                        ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(rootedBlocks(call, sendbuff, recvbuff, count, datatype, root, comm, stream, "ternGather",
                          "recvbuff"));
  if (count == 0) return ternSuccess;
  return launch(call, comm,
                collArgs(OpKind::Gather, sendbuff, recvbuff, count, datatype, ternSum, root), stream);
}

ternResult_t ternScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(rootedBlocks(call, recvbuff, sendbuff, count, datatype, root, comm, stream, "ternScatter",
                          "sendbuff"));
  if (count == 0) return ternSuccess;
  return launch(call, comm,
                collArgs(OpKind::Scatter, sendbuff, recvbuff, count, datatype, ternSum, root), stream);
}

ternResult_t ternReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ternDataType_t datatype, ternRedOp_t op, ternComm_t comm,
                               ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, recvcount, datatype, stream,
                       "ternReduceScatter"));
  TERN_CHECK(checkOpOrPreMulSum(comm, op, datatype, "ternReduceScatter"));
  if (recvcount == 0) return ternSuccess;
  return launch(call, comm,
                collArgs(OpKind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op), stream);
}

static ternResult_t pointToPoint(const void* buf, size_t count, ternDataType_t datatype, int peer,
                                 ternComm_t comm, ternStream_t stream, bool send) {
  InCall call(comm);
  const char* what = send ? "ternSend" : "ternRecv";
  TERN_CHECK(checkArgs(call, comm, buf, buf, count, datatype, stream, what));
  TERN_CHECK(checkRank(comm, peer, "peer", what));
  if (count == 0) return ternSuccess;
  if (peer == comm->rank && !groupOpen())
    return fail(comm, ternInvalidUsage,
                std::string(what) + " to self outside a group would wait forever; "
                                    "pair it with its match inside ternGroupStart/End");
  void* b = const_cast<void*>(buf);
  return launch(call, comm, collArgs(send ? OpKind::Send : OpKind::Recv, buf, b, count, datatype,
                               ternSum, peer), stream);
}

ternResult_t ternSend(const void* sendbuff, size_t count, ternDataType_t datatype, int peer,
                      ternComm_t comm, ternStream_t stream) {
  return pointToPoint(sendbuff, count, datatype, peer, comm, stream, true);
}

ternResult_t ternRecv(void* recvbuff, size_t count, ternDataType_t datatype, int peer,
                      ternComm_t comm, ternStream_t stream) {
  return pointToPoint(recvbuff, count, datatype, peer, comm, stream, false);
}

ternResult_t ternRecvAnySource(void* recvbuff, size_t count, ternDataType_t datatype, int* source,
                               ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  const char* what = "ternRecvAnySource";
  TERN_CHECK(checkArgs(call, comm, recvbuff, recvbuff, count, datatype, stream, what));
  if (!source) return fail(comm, ternInvalidArgument, "ternRecvAnySource: source is NULL");
  if (comm->nranks < 2)
    return fail(comm, ternInvalidUsage,
                "ternRecvAnySource on a communicator of one rank would wait forever: no other rank "
                "can send");
  if (count == 0)  // a zero-count send moves nothing: no sender could be named
    return fail(comm, ternInvalidArgument,
                "ternRecvAnySource: count is 0 (zero-count sends move nothing, so no sender "
                "could be named)");
  *source = -1;
  CollArgs a = collArgs(OpKind::Recv, recvbuff, recvbuff, count, datatype, ternSum, -1);
  a.source = source;
  return launch(call, comm, a, stream);
}

ternResult_t ternAllReduceTernaryEx(const void* sendbuff, void* recvbuff, size_t count,
                                    ternDataType_t datatype, ternRedOp_t op,
                                    const void* tensorHandle, ternComm_t comm,
                                    ternStream_t stream) {
  InCall call(comm);
  const char* what = "ternAllReduceTernary";
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, count, datatype, stream, what));
  TERN_CHECK(checkOp(comm, op, what));
  if (datatype != ternFloat32 && datatype != ternFloat16 && datatype != ternBfloat16)
    return fail(comm, ternInvalidArgument,
                std::string(what) + ": datatype must be float32, float16 or bfloat16, not " +
                    std::to_string(datatype));
  if (op != ternSum && op != ternAvg)
    return fail(comm, ternInvalidArgument,
                std::string(what) + ": op must be ternSum or ternAvg (ternary codes cannot "
                                    "express products, maxima or minima)");
  if (count == 0) return ternSuccess;
  CollArgs args = collArgs(OpKind::Ternary, sendbuff, recvbuff, count, datatype, op);
  return launch(call, comm, args, stream,
                makeTernaryTask(ternaryOf(comm), args, tensorHandle, comm->nranks,
                                currentPriority()));
}

ternResult_t ternAllReduceTernary(const void* sendbuff, void* recvbuff, size_t count,
                                  ternDataType_t datatype, ternRedOp_t op, ternComm_t comm,
                                  ternStream_t stream) {
  return ternAllReduceTernaryEx(sendbuff, recvbuff, count, datatype, op, nullptr, comm, stream);
}

ternResult_t ternCommGetTernaryConfig(const ternComm_t comm, ternTernaryConfig_t* config) {
  InCall call(comm);
  if (!config) return fail(nullptr, ternInvalidArgument, "config is NULL");
  TERN_CHECK(checkComm(call, comm));
  TernaryState& st = ternaryOf(comm);
  std::lock_guard<std::mutex> lk(st.mu);
  *config = st.cfg;
  return ternSuccess;
}

ternResult_t ternCommSetTernaryConfig(ternComm_t comm, const ternTernaryConfig_t* config) {
  InCall call(comm);
  if (!config) return fail(nullptr, ternInvalidArgument, "config is NULL");
  TERN_CHECK(checkComm(call, comm));
  if (const char* bad = ternaryConfigProblem(*config))
    return fail(comm, ternInvalidArgument, std::string("ternCommSetTernaryConfig: ") + bad);
  if (groupOpen())
    return fail(comm, ternInvalidUsage, "ternCommSetTernaryConfig cannot be called inside a group");
  // Calls issued from now on use it; running ones keep the options they
  // were issued with.
  TernaryState& st = ternaryOf(comm);
  std::lock_guard<std::mutex> lk(st.mu);
  st.cfg = *config;
  return ternSuccess;
}

ternResult_t ternCommReleaseTensor(ternComm_t comm, const void* tensorHandle) {
  InCall call(comm);
  TERN_CHECK(checkComm(call, comm));
  TernaryState& st = ternaryOf(comm);
  std::lock_guard<std::mutex> lk(st.mu);  // a running call keeps its own reference
  st.residuals.erase(tensorHandle);
  return ternSuccess;
}

ternResult_t ternCommGetTernaryStats(const ternComm_t comm, ternTernaryStats_t* stats) {
  InCall call(comm);
  if (!stats) return fail(nullptr, ternInvalidArgument, "stats is NULL");
  TERN_CHECK(checkComm(call, comm));
  TernaryState& st = ternaryOf(comm);
  std::lock_guard<std::mutex> lk(st.mu);
  *stats = st.stats;
  return ternSuccess;
}

ternResult_t ternBarrier(ternComm_t comm) {
  InCall call(comm);
  TERN_CHECK(checkComm(call, comm));
  if (groupOpen())
    return fail(comm, ternInvalidUsage, "ternBarrier cannot be called inside a group");
  return launch(call, comm, collArgs(OpKind::Barrier, nullptr, nullptr, 1, ternInt32));
}

}  // extern "C"
