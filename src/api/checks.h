// The C API's argument checks, shared by its files: the common case inline
// (a host call with sane arguments: no division, no string, no call), every
// refusal with its sentence out of line (checks.cc).
#pragma once
#include <functional>
#include <memory>

#include "api/group.h"
#include "base/error.h"
#include "collectives/collectives.h"
#include "memory/memory.h"
#include "memory/staged.h"

namespace tern {

ternResult_t argsRefused(ternComm* c, const void* buf, const void* buf2, size_t count, ternDataType_t dt,
                         ternStream_t stream, const char* what);
ternResult_t opRefused(ternComm* c, ternRedOp_t op, const char* what);
ternResult_t opOrPreMulSumRefused(ternComm* c, ternRedOp_t op, ternDataType_t dt, const char* what);
ternResult_t rankRefused(ternComm* c, int r, const char* role, const char* what);

// A live, healthy communicator, a datatype, buffers for `count` elements, no
// stream.  The count bound: every rank's share of the largest element type
// fits a size_t.
inline ternResult_t checkArgs(const InCall& call, ternComm* c, const void* buf, const void* buf2, size_t count,
                              ternDataType_t dt, ternStream_t stream, const char* what) {
  TERN_CHECK(checkLiveComm(call, c));
  size_t all;
  if (__builtin_expect(static_cast<unsigned>(dt) < static_cast<unsigned>(ternNumTypes) &&
                           !__builtin_mul_overflow(count, 8 * static_cast<size_t>(c->nranks), &all) &&
                           (count == 0 || (buf && buf2)) && !stream,
                       1))
    return ternSuccess;
  return argsRefused(c, buf, buf2, count, dt, stream, what);
}

inline ternResult_t checkOp(ternComm* c, ternRedOp_t op, const char* what) {
  if (__builtin_expect(static_cast<unsigned>(op) < static_cast<unsigned>(ternNumOps), 1)) return ternSuccess;
  return opRefused(c, op, what);
}

// A built-in op, or one of c's PreMulSum ops made for datatype dt.
inline ternResult_t checkOpOrPreMulSum(ternComm* c, ternRedOp_t op, ternDataType_t dt, const char* what) {
  if (__builtin_expect(static_cast<unsigned>(op) < static_cast<unsigned>(ternNumOps), 1)) return ternSuccess;
  return opOrPreMulSumRefused(c, op, dt, what);
}

inline ternResult_t checkRank(ternComm* c, int r, const char* role, const char* what) {
  if (__builtin_expect(static_cast<unsigned>(r) < static_cast<unsigned>(c->nranks), 1)) return ternSuccess;
  return rankRefused(c, r, role, what);
}

// A call on a stream: its buffers' memory type (device memory only), then
// the path it takes, decided once:
//  - one rank: one device-to-device copy on the stream, done (*mem null);
//  - a stream being captured into a CUDA graph: recorded (memory/staged.h,
//    captureStaged), done (*mem null); the engine runs it at each replay
//    through the submit function `replay` makes for the call's arguments;
//    refused with a sentence where the staged path cannot take it
//    (ternInvalidUsage);
//  - staged (outside a group, a built-in op, no task, buffers up to
//    TERN_STAGED_MAX_BYTES): a->src / a->dst replaced by their pinned copies;
//  - else the engine's device path.
// *mem is begun now outside a group (checks.cc says why).
using StagedSubmitFor = std::function<StagedSubmit(std::shared_ptr<CollArgs>)>;
ternResult_t streamOps(ternComm* c, CollArgs* a, bool stageable, ternStream_t stream,
                       const char* what, const StagedSubmitFor& replay, std::unique_ptr<MemOps>* mem);

}  // namespace tern
