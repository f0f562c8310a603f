// libnccl.so.2 over tern: the communicator object, error and log helpers the
// entry points share.  Built against the CUDA toolkit's own nccl.h, so every
// type and enum value is NCCL's; only tern's public C API is called below it.
#pragma once
#include <nccl.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <mutex>
#include <string>
#include <vector>

#include "tern/tern.h"

// Defines pnccl<name> (the implementation, global as in NCCL's own library)
// and nccl<name> as a weak alias of it: a profiler may interpose nccl<name>
// and call pnccl<name>, as with MPI's PMPI.
#define NCCL_SHIM_API(ret, name, ...)                                              \
  extern "C" ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));        \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

// The communicator handed to the caller: tern's communicator plus what NCCL
// keeps per communicator and tern does not (user ops, the config, the name).
struct ncclComm {
  uint64_t magic = kMagic;
  ternComm_t tern = nullptr;
  int rank = -1, nranks = 0;
  ternConfig_t config = TERN_CONFIG_INITIALIZER;  // what children inherit (Split / Shrink)
  bool blocking = true;
  std::string name;               // ncclConfig_t.commName
  int cudaDev = -1;               // the caller's device at init (ncclCommCuDevice)
  std::atomic<bool> revoked{false};
  std::atomic<int> initResult{ncclInProgress};  // ncclSuccess once tern's communicator exists

  // A PreMulSum op: tern's (ternRedOpCreatePreMulSum), which scales on the
  // host or, for device buffers, as a kernel on the operation's stream.
  struct PreMulSum {
    ncclDataType_t dtype = ncclFloat32;
    ternRedOp_t ternOp = ternSum;
  };
  std::mutex mu;
  std::map<int, PreMulSum> ops;   // ncclRedOp_t value -> user op
  int nextOp = ncclNumOps;
  std::thread initThread;                         // a nonblocking init outside a group

  static constexpr uint64_t kMagic = 0x7465726e6e63636cull;  // "ternnccl"
};

namespace shim {

// Remembers the sentence for ncclGetLastError (the calling thread's) and
// returns code.  A printf-style sentence, one line.
ncclResult_t fail(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// A tern result as an NCCL result; on failure the sentence is tern's.
ncclResult_t fromTern(ncclComm_t comm, ternResult_t r);
const char* lastError(ncclComm_t comm);

// TERN_NCCL_SHIM_LOG=1: one line per call on stderr, "host:pid:rank".
bool logEnabled();
ncclResult_t traced(ncclComm_t comm, ncclResult_t r, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Live communicators: a NULL or destroyed handle is refused, not followed.
void registerComm(ncclComm_t comm);
void unregisterComm(ncclComm_t comm);
ncclResult_t checkLive(ncclComm_t comm, const char* what);
// Live, initialised and (unless allowRevoked) not revoked.
ncclResult_t checkComm(ncclComm_t comm, const char* what, bool allowRevoked = false);
// Waits until tern has no operation of comm in flight; their result.
ncclResult_t waitIdle(ncclComm_t comm);

// A function of the CUDA driver (libcuda.so.1) if the program has loaded it,
// as type F (nullptr otherwise); the shim never loads CUDA itself and links
// nothing of it.
void* driverFunction(const char* name);
template <class F>
F driverFunction(const char* name) {
  return reinterpret_cast<F>(driverFunction(name));
}
// Whether either is device memory (the driver, if the program loaded it, says).
bool deviceBuffers(const void* a, const void* b);
// The calling thread's CUDA device (its current context's), as NCCL records
// it at init; -1 when the program has not loaded the driver or has no context.
int currentDevice();

// Type and op mapping (fp8 and unknown values -> ncclInvalidArgument).
ncclResult_t toTernType(ncclComm_t comm, ncclDataType_t t, ternDataType_t* out, const char* what);
const char* typeName(ncclDataType_t t);
const char* opName(ncclRedOp_t op);
size_t typeSize(ncclDataType_t t);

// ncclConfig_t as NCCL reads it: size first, magic, fields gated by version.
ncclResult_t readConfig(const ncclConfig_t* user, ternConfig_t* out, std::string* name);

// Group handling: inside ncclGroupStart/End, calls are validated at once and
// run at the outermost ncclGroupEnd (so ncclGroupSimulateEnd can drop them).
// A PreMulSum scales its input when the operation runs, as NCCL does.
bool inGroup();
// Runs op now (outside a group) or at the group's end.
ncclResult_t submit(ncclComm_t comm, std::function<ternResult_t()> op);
// Deferred communicator inits of the current group run side by side at its end.
void deferInit(std::function<void()> init);

// The tern op a collective runs: built-in ops map directly; a PreMulSum op
// (op >= ncclNumOps) is its tern PreMulSum op, made for datatype dt.
ncclResult_t resolveOp(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t dt, ternRedOp_t* out,
                       const char* what);

// Makes shim communicator `c`'s tern communicator (blocking: waits for the ranks).
ncclResult_t initTern(ncclComm_t c, int nranks, const ternUniqueId& id, int rank);
// Every ncclCommInit* variant (and Split / Shrink): base is the config that
// `config`'s set fields override (defaults, or the parent's).
ncclResult_t startInit(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                       const ncclConfig_t* config, const ternConfig_t& base, const char* what);
ncclResult_t newComm(ncclComm_t* out, const ternConfig_t& cfg, const std::string& name);
void freeComm(ncclComm_t c);
// Frees the registrations and windows comm still holds (at destroy / abort).
void dropHandles(ncclComm_t comm);

}  // namespace shim
