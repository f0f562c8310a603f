// Error sentences (ncclGetLastError / ncclGetErrorString), the per-call log
// and the table of live communicators.
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "nccl_shim/shim.h"

namespace shim {
namespace {

thread_local std::string tlsLastError;
thread_local int tlsRank = -1;  // the rank of the last communicator this thread used (log prefix)

std::mutex& liveMu() {
  static std::mutex m;
  return m;
}
std::unordered_set<ncclComm_t>& live() {
  static auto* s = new std::unordered_set<ncclComm_t>;  // never destroyed: atexit order
  return *s;
}

std::string vformat(const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  return buf;
}

// As in tern (and NCCL), the sentence is the calling thread's: the call
// that returns the failure records it, whatever communicator it was on.
void remember(const std::string& msg) { tlsLastError = msg; }

}  // namespace

ncclResult_t fail(ncclResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  remember(msg);
  return code;
}

ncclResult_t fromTern(ncclComm_t comm, ternResult_t r) {
  if (r == ternSuccess || r == ternInProgress) return static_cast<ncclResult_t>(r);
  remember(ternGetLastError(comm ? comm->tern : nullptr));
  // NCCL has no timeout code: a stalled peer is the remote side's failure.
  if (r == ternTimeout) return ncclRemoteError;
  return static_cast<ncclResult_t>(r);  // 1..6 have the same meaning and value
}

// A thread that has recorded no failure hears why the communicator failed,
// if it did (ternGetLastError's rule).
const char* lastError(ncclComm_t comm) {
  if (!tlsLastError.empty() || !comm) return tlsLastError.c_str();
  std::lock_guard<std::mutex> g(liveMu());
  return live().count(comm) ? ternGetLastError(comm->tern) : tlsLastError.c_str();
}

bool logEnabled() {
  static const bool on = [] {
    const char* v = getenv("TERN_NCCL_SHIM_LOG");
    return v && *v && strcmp(v, "0") != 0;
  }();
  return on;
}

ncclResult_t traced(ncclComm_t comm, ncclResult_t r, const char* fmt, ...) {
  if (!logEnabled()) return r;
  va_list ap;
  va_start(ap, fmt);
  std::string call = vformat(fmt, ap);
  va_end(ap);
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  if (comm && comm->rank >= 0) tlsRank = comm->rank;
  char rank[16] = "-";
  if (tlsRank >= 0) snprintf(rank, sizeof rank, "%d", tlsRank);
  // One fprintf per line (as tern's own log) so threads never interleave mid-line.
  fprintf(stderr, "%s:%d [%s] TERN-NCCL %s -> %s\n", host, (int)getpid(), rank, call.c_str(),
          ncclGetErrorString(r));
  return r;
}

void registerComm(ncclComm_t comm) {
  std::lock_guard<std::mutex> g(liveMu());
  live().insert(comm);
}

void unregisterComm(ncclComm_t comm) {
  std::lock_guard<std::mutex> g(liveMu());
  live().erase(comm);
}

ncclResult_t checkLive(ncclComm_t comm, const char* what) {
  if (!comm) return fail(ncclInvalidArgument, "%s: comm is NULL", what);
  std::lock_guard<std::mutex> g(liveMu());
  if (!live().count(comm))
    return fail(ncclInvalidArgument,
                "%s: comm is not a live communicator (destroyed, or never made by ncclCommInit*)", what);
  return ncclSuccess;
}

ncclResult_t checkComm(ncclComm_t comm, const char* what, bool allowRevoked) {
  if (ncclResult_t r = checkLive(comm, what)) return r;
  int init = comm->initResult.load();
  if (init == ncclInProgress)
    return fail(ncclInvalidUsage,
                "%s: the communicator is still being initialised (ncclCommGetAsyncError says when "
                "it is ready)",
                what);
  if (init != ncclSuccess)
    return fail(ncclInvalidUsage, "%s: the communicator's initialisation failed", what);
  if (!allowRevoked && comm->revoked.load())
    return fail(ncclInvalidUsage, "%s: the communicator was revoked; only destroy, split and shrink remain",
                what);
  return ncclSuccess;
}

}  // namespace shim

NCCL_SHIM_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (ncclGetLastError says which)";
    case ncclSystemError: return "unhandled system error (ncclGetLastError says which)";
    case ncclInternalError: return "internal error (ncclGetLastError says which)";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError says which)";
    case ncclInvalidUsage: return "invalid usage (ncclGetLastError says which)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

NCCL_SHIM_API(const char*, ncclGetLastError, ncclComm_t comm) { return shim::lastError(comm); }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
NCCL_SHIM_API(void, ncclResetDebugInit) {}  // tern reads TERN_DEBUG per process; nothing to reload
#pragma GCC diagnostic pop
