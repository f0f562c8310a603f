// Communicator life cycle: version, unique id, the init variants, finalize /
// destroy / abort / revoke, asynchronous errors and the queries.
#include <cstring>
#include <thread>

#include "nccl_shim/shim.h"

namespace shim {

// The NCCL version whose semantics the shim implements: everything of 2.23
// (Avg and bf16 from 2.10, PreMulSum from 2.11, ...) but not the 8-bit float
// types 2.24 added, which tern cannot reduce.  nccl-tests and torch gate
// features on this number.
constexpr int kImplementedVersion = 22300;  // NCCL_VERSION(2, 23, 0)

ncclResult_t newComm(ncclComm_t* out, const ternConfig_t& cfg, const std::string& name) {
  auto* c = new (std::nothrow) ncclComm;
  if (!c) return fail(ncclSystemError, "out of memory for a communicator");
  c->config = cfg;
  c->blocking = cfg.blocking != 0;  // unset (TERN_CONFIG_UNDEF_INT) is blocking, as NCCL's default
  c->name = name;
  c->cudaDev = currentDevice();  // on the caller's thread, whose device NCCL takes
  registerComm(c);
  *out = c;
  return ncclSuccess;
}

void freeComm(ncclComm_t c) {
  if (c->initThread.joinable()) c->initThread.join();
  unregisterComm(c);
  dropHandles(c);
  delete c;
}

ncclResult_t initTern(ncclComm_t c, int nranks, const ternUniqueId& id, int rank) {
  ternResult_t tr = ternCommInitRankConfig(&c->tern, nranks, id, rank, &c->config);
  ncclResult_t r = fromTern(c, tr);
  c->initResult.store(r);
  return r;
}

ncclResult_t waitIdle(ncclComm_t c) {
  for (int spins = 0;; ++spins) {
    ternResult_t e = ternSuccess;
    ternResult_t q = ternCommGetAsyncError(c->tern, &e);
    if (q != ternSuccess) return fromTern(c, q);
    if (e != ternInProgress) return fromTern(c, e);
    // tern fails a stalled operation after its timeout, so this ends.
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 100 ? 50 : 1000));
  }
}

namespace {

ncclResult_t checkRanks(int nranks, int rank, const char* what) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "%s: rank %d of %d is not in [0, nranks)", what, rank, nranks);
  return ncclSuccess;
}

}  // namespace

// Every init variant: checks, the comm handle at once, tern's communicator
// now (blocking), in the background (nonblocking: ncclInProgress) or at the
// group's end (inside ncclGroupStart/End).
ncclResult_t startInit(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                       const ncclConfig_t* config, const ternConfig_t& base, const char* what) {
  if (!out) return fail(ncclInvalidArgument, "%s: comm is NULL", what);
  *out = nullptr;
  if (ncclResult_t r = checkRanks(nranks, rank, what)) return r;
  ternConfig_t cfg = base;
  std::string name;
  if (ncclResult_t r = readConfig(config, &cfg, &name)) return r;
  ncclComm_t c;
  if (ncclResult_t r = newComm(&c, cfg, name)) return r;
  c->rank = rank;
  c->nranks = nranks;
  ternUniqueId tid;
  static_assert(sizeof tid == sizeof id, "tern's and NCCL's unique ids are both 128 bytes");
  memcpy(&tid, &id, sizeof tid);
  auto job = [c, nranks, tid, rank] { initTern(c, nranks, tid, rank); };
  *out = c;
  if (inGroup()) {
    deferInit(job);
    return ncclSuccess;
  }
  if (!c->blocking) {
    c->initThread = std::thread(job);
    return ncclInProgress;
  }
  job();
  ncclResult_t r = static_cast<ncclResult_t>(c->initResult.load());
  if (r != ncclSuccess) {  // a failed blocking init leaves no communicator behind
    freeComm(c);
    *out = nullptr;
  }
  return r;
}

}  // namespace shim

using namespace shim;

NCCL_SHIM_API(ncclResult_t, ncclGetVersion, int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = kImplementedVersion;
  return ncclSuccess;
}

NCCL_SHIM_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  ternUniqueId id;
  ncclResult_t r = fromTern(nullptr, ternGetUniqueId(&id));
  if (r == ncclSuccess) memcpy(uniqueId, &id, sizeof id);
  return traced(nullptr, r, "ncclGetUniqueId");
}

NCCL_SHIM_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks,
              ncclUniqueId commId, int rank, ncclConfig_t* config) {
  const ternConfig_t base = TERN_CONFIG_INITIALIZER;
  ncclResult_t r = startInit(comm, nranks, commId, rank, config, base, "ncclCommInitRankConfig");
  return traced(comm ? *comm : nullptr, r, "ncclCommInitRankConfig(nranks=%d, rank=%d)", nranks,
                rank);
}

NCCL_SHIM_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId,
              int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

// tern bootstraps from one root, so the first id serves; every rank passes
// the same list (NCCL's rule), hence the same first id.
NCCL_SHIM_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank,
              int nId, ncclUniqueId* commIds, ncclConfig_t* config) {
  const char* what = "ncclCommInitRankScalable";
  if (nId < 1 || nId > nranks || !commIds)
    return traced(nullptr,
                  fail(ncclInvalidArgument, "%s: nId %d is not in [1, nranks=%d] or commIds is NULL", what,
                       nId, nranks),
                  "%s", what);
  return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

// One process, ndev ranks: the inits run in threads at the group's end.  On
// the host path devlist only has to name distinct non-negative devices.
NCCL_SHIM_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  const char* what = "ncclCommInitAll";
  if (!comms || ndev < 1) return fail(ncclInvalidArgument, "%s: comms is NULL or ndev %d < 1", what, ndev);
  for (int i = 0; devlist && i < ndev; ++i)
    for (int j = 0; j < i; ++j)
      if (devlist[i] < 0 || devlist[i] == devlist[j])
        return fail(ncclInvalidUsage, "%s: devlist[%d] = %d is negative or repeated", what, i, devlist[i]);
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id)) return r;
  ncclGroupStart();
  for (int i = 0; i < ndev; ++i) ncclCommInitRank(&comms[i], ndev, id, i);
  ncclResult_t r = ncclGroupEnd();
  for (int i = 0; r == ncclSuccess && i < ndev; ++i)
    r = static_cast<ncclResult_t>(comms[i] ? comms[i]->initResult.load() : ncclInternalError);
  // Rank i's device is devlist[i] (or i), as NCCL's, in a program using CUDA.
  for (int i = 0; r == ncclSuccess && i < ndev; ++i)
    if (comms[i]->cudaDev >= 0) comms[i]->cudaDev = devlist ? devlist[i] : i;
  return traced(nullptr, r, "%s(ndev=%d)", what, ndev);
}

// tern completes operations without a flush step: finalize waits for the
// in-flight ones (nonblocking: reports ncclInProgress until they are done).
NCCL_SHIM_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  ncclResult_t r = checkComm(comm, "ncclCommFinalize");
  if (r == ncclSuccess) {
    ternResult_t e = ternSuccess;
    ternCommGetAsyncError(comm->tern, &e);
    r = (!comm->blocking && e == ternInProgress) ? ncclInProgress : waitIdle(comm);
  }
  return traced(comm, r, "ncclCommFinalize");
}

static ncclResult_t endComm(ncclComm_t comm, ternResult_t (*end)(ternComm_t), const char* what) {
  if (ncclResult_t r = checkLive(comm, what)) return r;
  if (comm->initThread.joinable()) comm->initThread.join();
  ternResult_t tr = comm->tern ? end(comm->tern) : ternSuccess;
  ncclResult_t r = fromTern(nullptr, tr);
  freeComm(comm);
  return r;
}

NCCL_SHIM_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  int rank = comm ? comm->rank : -1;
  ncclResult_t r = endComm(comm, ternCommDestroy, "ncclCommDestroy");
  return traced(nullptr, r, "ncclCommDestroy(rank %d)", rank);
}

NCCL_SHIM_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  int rank = comm ? comm->rank : -1;
  ncclResult_t r = endComm(comm, ternCommAbort, "ncclCommAbort");
  return traced(nullptr, r, "ncclCommAbort(rank %d)", rank);
}

// tern cannot cancel one operation without failing the communicator, so a
// revoke lets in-flight operations finish (bounded by the timeout) and then
// refuses new ones; destroy, split and shrink still work.
NCCL_SHIM_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  ncclResult_t r = checkComm(comm, "ncclCommRevoke");
  if (r == ncclSuccess && revokeFlags != NCCL_REVOKE_DEFAULT)
    r = fail(ncclInvalidArgument, "ncclCommRevoke: revokeFlags %d is not NCCL_REVOKE_DEFAULT", revokeFlags);
  if (r == ncclSuccess) {
    comm->revoked.store(true);
    ncclResult_t w = waitIdle(comm);
    r = (w == ncclSuccess || w == ncclInProgress) ? ncclSuccess : w;
  }
  return traced(comm, r, "ncclCommRevoke");
}

NCCL_SHIM_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommGetAsyncError")) return r;
  int init = comm->initResult.load();
  if (init != ncclSuccess) {  // still initialising, or the init failed
    *asyncError = static_cast<ncclResult_t>(init);
    return ncclSuccess;
  }
  {  // init is done: reap its thread (once, whichever thread polls first)
    std::lock_guard<std::mutex> g(comm->mu);
    if (comm->initThread.joinable()) comm->initThread.join();
  }
  ternResult_t e = ternSuccess;
  if (ncclResult_t q = fromTern(comm, ternCommGetAsyncError(comm->tern, &e))) return q;
  *asyncError = fromTern(comm, e);
  // As NCCL's: a blocking communicator's work still running on a stream
  // (device buffers) is not an error; PyTorch's watchdog polls this.
  if (*asyncError == ncclInProgress && comm->blocking) *asyncError = ncclSuccess;
  return ncclSuccess;
}

NCCL_SHIM_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  ncclResult_t r = checkLive(comm, "ncclCommCount");
  if (r == ncclSuccess && !count) r = fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  if (r == ncclSuccess) *count = comm->nranks;
  return r;
}

NCCL_SHIM_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  ncclResult_t r = checkLive(comm, "ncclCommUserRank");
  if (r == ncclSuccess && !rank) r = fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  if (r == ncclSuccess) *rank = comm->rank;
  return r;
}

// The device that was current when the communicator was made, as NCCL's;
// -1 (CUDA's cudaCpuDeviceId) in a program without CUDA.  tern itself runs
// each operation on its buffers' device.
NCCL_SHIM_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  ncclResult_t r = checkLive(comm, "ncclCommCuDevice");
  if (r == ncclSuccess && !device) r = fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  if (r == ncclSuccess) *device = comm->cudaDev;
  return r;
}
