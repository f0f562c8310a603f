// The C API's argument checks: the sentences of every refusal (the common
// case, inline, is checks.h's) and the memory operations of a call on a
// stream, refused with a sentence when its buffers are not device memory.
#include "api/checks.h"

#include <cstring>
#include <string>

#include "api/group.h"
#include "api/premul.h"
#include "base/error.h"
#include "base/env.h"
#include "base/log.h"
#include "memory/buffer_kind.h"
#include "memory/simulated.h"
#include "memory/staged.h"

namespace tern {

#ifdef TERN_WITH_CUDA
const char* const kNoDeviceWhy = "no driver or no device";
#else
const char* const kNoDeviceWhy = "libtern was built without CUDA";
#endif

[[gnu::noinline, gnu::cold]] ternResult_t argsRefused(ternComm* c, const void* buf, const void* buf2,
                                                      size_t count, ternDataType_t dt, ternStream_t stream,
                                                      const char* what) {
  if (static_cast<int>(dt) < 0 || dt >= ternNumTypes)
    return setError(ternInvalidArgument,
                    std::string(what) + ": datatype " + std::to_string(dt) + " is not a ternDataType_t");
  size_t all;
  if (__builtin_mul_overflow(count, 8 * static_cast<size_t>(c->nranks), &all))
    return setError(ternInvalidArgument, std::string(what) + ": count is too large");
  if (count > 0 && (!buf || !buf2))
    return setError(ternInvalidArgument,
                    std::string(what) + ": a buffer is NULL but count is " + std::to_string(count));
  if (stream && !deviceMemoryUsable())
    return setError(ternInvalidArgument, std::string(what) +
                                             ": stream is not NULL but this process has no usable CUDA "
                                             "device (" +
                                             kNoDeviceWhy +
                                             "), so its buffers cannot be device memory: pass host "
                                             "buffers and a NULL stream");
  return ternSuccess;
}

[[gnu::noinline, gnu::cold]] ternResult_t opRefused(ternComm* c, ternRedOp_t op, const char* what) {
  return setError(ternInvalidArgument,
                  std::string(what) + ": op " + std::to_string(op) + " is not a ternRedOp_t");
}

// A built-in op, or one of c's PreMulSum ops made for datatype dt.
[[gnu::noinline]] ternResult_t opOrPreMulSumRefused(ternComm* c, ternRedOp_t op, ternDataType_t dt, const char* what) {
  if (static_cast<int>(op) < ternNumOps) return opRefused(c, op, what);
  ternDataType_t made;
  if (!isPreMulSum(c, op, &made))
    return setError(ternInvalidArgument,
                    std::string(what) + ": op " + std::to_string(op) +
                        " is neither a ternRedOp_t nor a live ternRedOpCreatePreMulSum op of this "
                        "communicator");
  if (made != dt)
    return setError(ternInvalidArgument, std::string(what) + ": op " + std::to_string(op) +
                                             " was made for datatype " + std::to_string(made) +
                                             " but the call's datatype is " + std::to_string(dt));
  return ternSuccess;
}

[[gnu::noinline, gnu::cold]] ternResult_t rankRefused(ternComm* c, int r, const char* role, const char* what) {
  return setError(ternInvalidArgument, std::string(what) + ": " + role + " " + std::to_string(r) +
                                           " is not in [0, " + std::to_string(c->nranks) + ")");
}

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
    return setError(ternInvalidArgument, std::string(what) + ": " + why);
  if (n == 2 && dev[0] != dev[1])
    return setError(ternInvalidArgument, std::string(what) + ": sendbuff is on device " +
                                             std::to_string(dev[0]) + " but recvbuff on device " +
                                             std::to_string(dev[1]));
  *type = n ? kinds[0].kind : MemType::Host;
  *device = dev[0];
  if (*type == MemType::Host)
    return setError(ternInvalidArgument,
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
// The bytes of a call's buffers on this rank (0 where it does not use one:
// usedBuffers' rule).  Counts are per rank for allgather and reduce-scatter,
// per block for all-to-all, gather and scatter.
StagedBuffers stagedBuffers(const ternComm* c, const CollArgs& a) {
  const size_t one = a.count * ternTypeSize(a.dt), all = one * static_cast<size_t>(c->nranks);
  StagedBuffers b;
  BufferKind kinds[2];
  const void* ptrs[2];
  const int n = usedBuffers(c, a, kinds, ptrs);
  for (int i = 0; i < n; ++i) {
    const bool src = !strcmp(kinds[i].name, "sendbuff");
    const bool many = src ? (a.kind == OpKind::ReduceScatter || a.kind == OpKind::AllToAll ||
                             a.kind == OpKind::Scatter)
                          : (a.kind == OpKind::AllGather || a.kind == OpKind::AllToAll ||
                             a.kind == OpKind::Gather);
    if (src) b.src = a.src, b.srcBytes = many ? all : one;
    else b.dst = a.dst, b.dstBytes = many ? all : one;
  }
  return b;
}

const StagedDevice* stagedDeviceFor(MemType t) {
  return t == MemType::Cuda ? cudaStagedDevice() : t == MemType::Simulated ? sim::stagedDevice() : nullptr;
}

// Whether this call may be staged (memory/staged.h): outside a group, a
// built-in op, no buffer over TERN_STAGED_MAX_BYTES.
bool stageableCall(const CollArgs& a, const StagedBuffers& b) {
  static const size_t maxBytes = static_cast<size_t>(envInt("TERN_STAGED_MAX_BYTES", 64 << 20));
  return !groupOpen() && static_cast<int>(a.op) < ternNumOps && b.srcBytes <= maxBytes &&
         b.dstBytes <= maxBytes;
}

// The staged path for this call, or nullptr: the engine's device path
// (larger buffers, groups, PreMulSum, tasks) takes it then.
std::unique_ptr<MemOps> stagedOps(ternComm* c, CollArgs* a, const StagedDevice& dev, ternStream_t stream) {
  StagedBuffers b = stagedBuffers(c, *a);
  if (!stageableCall(*a, b)) return nullptr;
  std::string why;
  std::unique_ptr<MemOps> ops = makeStagedOps(dev, stream, &b, &why);
  if (!ops) {
    TERN_LOG(Info, "%s on a stream takes the engine's device path: %s", collectiveKind(a->kind).name,
             why.c_str());
    return nullptr;
  }
  a->src = b.src;
  a->dst = static_cast<void*>(b.dst);
  return ops;
}

// One rank: a collective is its send buffer copied to its receive buffer
// (nothing in place), one device-to-device copy on the caller's stream,
// which a graph may capture too (NCCL's one rank is a kernel).
bool copiesAlone(const ternComm* c, const CollArgs& a, bool stageable) {
  return c->nranks == 1 && stageable && static_cast<int>(a.op) < ternNumOps &&
         a.kind != OpKind::Send && a.kind != OpKind::Recv;
}

ternResult_t copyAlone(ternComm* c, const CollArgs& a, const StagedDevice& dev, ternStream_t stream,
                       const char* what) {
  const StagedBuffers b = stagedBuffers(c, a);
  if (b.srcBytes && b.dstBytes && b.src != b.dst)
    if (int e = dev.deviceToDevice(b.dst, b.src, b.dstBytes, stream))
      return setError(ternUnhandledCudaError, std::string(what) + ": " + dev.error(e));
  return ternSuccess;
}

// A call on a stream being captured into a CUDA graph: recorded, and run by
// the engine at each replay through the submit function submitFor makes.
ternResult_t captureCall(ternComm* c, const CollArgs& a, bool stageable, const StagedDevice& dev,
                         ternStream_t stream, const char* what, const StagedSubmitFor& submitFor) {
  StagedBuffers b = stagedBuffers(c, a);
  if (!stageable || !stageableCall(a, b))
    return setError(ternInvalidUsage,
                    std::string(what) +
                        ": a stream being captured into a CUDA graph takes only calls "
                        "outside a group, with a built-in op, no buffer over TERN_STAGED_MAX_BYTES and not "
                        "the ternary allreduce; make this call outside the capture");
  auto pinned = std::make_shared<CollArgs>(a);
  std::string why;
  if (!captureStaged(dev, stream, &b, submitFor(pinned), &why))
    return setError(ternUnhandledCudaError, std::string(what) + ": " + why);
  pinned->src = b.src;  // before any replay: the graph is not launched yet
  pinned->dst = static_cast<void*>(b.dst);
  return ternSuccess;
}

ternResult_t streamOps(ternComm* c, CollArgs* a, bool stageable, ternStream_t stream,
                       const char* what, const StagedSubmitFor& replay, std::unique_ptr<MemOps>* mem) {
  MemType type;
  int device;
  TERN_CHECK(streamBuffers(c, *a, what, &type, &device));
  if (const StagedDevice* dev = stagedDeviceFor(type)) {
    if (copiesAlone(c, *a, stageable)) return copyAlone(c, *a, *dev, stream, what);
    if (dev->capturing(stream)) return captureCall(c, *a, stageable, *dev, stream, what, replay);
    if (stageable) *mem = stagedOps(c, a, *dev, stream);
  }
  if (!*mem) *mem = makeStreamOps(type, stream, device);
  if (!*mem)
    return setError(ternUnhandledCudaError,
                    std::string(what) + ": could not set up the device operation (no work stream)");
  if (groupOpen()) return ternSuccess;
  (*mem)->begin();
  if ((*mem)->error() != ternSuccess)
    return setError((*mem)->error(), std::string(what) + ": " + (*mem)->lastError());
  return ternSuccess;
}
}  // namespace tern
