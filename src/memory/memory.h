// Memory types: where an operation's buffers live decides how its bytes are
// copied, reduced and ternary-coded (UCC's mc/ec split).  Plans and the
// executor never touch user memory directly: every copy, reduction and codec
// call goes through the operation's MemOps, so host code never dereferences a
// device pointer.  Host memory (synchronous) and, in builds with CUDA, device
// memory (kernels on the operation's stream, asynchronous: see "Async
// contract" below and docs/DECISIONS.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codec/ternary_cpu.h"
#include "memory/ipc.h"
#include "tern/tern.h"

namespace tern {

// Simulated: a stand-in for the GPU in CI, where no device exists (host
// memory behind addresses the host may not touch, a worker thread as the
// stream; memory/simulated.h).  Chosen only by a test hook, never by a user.
enum class MemType { Host = 0, Cuda = 1, Simulated = 2 };
const char* memTypeName(MemType t);

class MemOps {
 public:
  virtual ~MemOps() = default;
  virtual MemType type() const = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) const = 0;
  // dst[i] = a[i] (op) b[i]; dst may alias a or b; avgDivisor > 0: divide the sum.
  virtual void reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
                      ternRedOp_t op, int avgDivisor) const = 0;
  virtual void divide(void* buf, size_t count, ternDataType_t dt, int divisor) const = 0;
  // A PreMulSum's scaling: dst[i] = src[i] * scalar[0] (host_reduce.h's
  // scaleKernel).  scalar is one element of dt in host memory or in this
  // type's; device types read it in stream order.
  virtual void scale(void* dst, const void* src, size_t count, ternDataType_t dt,
                     const void* scalar) const = 0;
  // Memory of this type that the operation may use until this MemOps is
  // destroyed (a PreMulSum's scaled input); nullptr when there is none.
  // The host type has none: host callers use host memory.
  virtual void* scratch(size_t /*bytes*/) const { return nullptr; }
  // The ternary codec's kernels for this memory.
  virtual const TernaryKernels& ternary() const = 0;
  // Ternary allreduce, the pass over the caller's gradient besides the
  // codec: per-block max |g| (and sum of g^2 when sumSq is not null).
  virtual void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                                 float* maxAbs, float* sumSq) const = 0;
  // `count` floats of this memory that outlive the operation (error
  // feedback's residuals, collectives/ternary.h), zero for work ordered
  // after this call; freed with the last reference.  nullptr when there is
  // no memory.
  virtual std::shared_ptr<float> persistentZeros(size_t count) const = 0;

  // The codec on this memory (TernaryKernels' three calls), ordered on
  // stream() for device types.  The host type runs ternary()'s functions;
  // device types override these: their buffers are device memory, and the
  // function-pointer table cannot carry the operation's stream.
  virtual void ternaryEncode(const TernaryInput& in, size_t g0, size_t n, uint32_t* out) const {
    ternary().encode(in, g0, n, out);
  }
  virtual void ternaryAddEncode(const TernaryInput& in, size_t g0, size_t n,
                                const uint32_t* planes, int win, uint32_t* out, int wout) const {
    ternary().addEncode(in, g0, n, planes, win, out, wout);
  }
  virtual void ternaryDecode(const uint32_t* planes, int w, size_t g0, size_t n,
                             const float* scales, uint32_t block, size_t count, ternDataType_t dt,
                             int avgN, void* dst) const {
    ternary().decode(planes, w, g0, n, scales, block, count, dt, avgN, dst);
  }

  // Async contract.  A synchronous type (host) has finished every call when
  // it returns: begin() and end() do nothing, stream() is null, fence() is 0
  // and done() is always true, so the executor's host path pays nothing.
  // An asynchronous type (CUDA) only enqueues: every call above is ordered
  // on stream() (its own work stream, not the caller's) and returns at once,
  // and the memory it names must not be read, reused or handed to the
  // network until a fence() taken after the call is done().  The executor:
  //  1. begin() is called when the call is made (api.cc, on the caller's
  //     thread, so it sits in the caller's stream order; inside a group at
  //     the group's end, as NCCL does: group.cc): follow() makes the work
  //     stream wait (on the device) for what the caller put on its stream
  //     earlier, hold() makes the caller's stream wait for end().  A group
  //     follows every operation's stream before it holds any, so no
  //     operation of the group waits for another's hold.  The executor
  //     starts the operation once ready() says that earlier work is done
  //     (polled, never waited for: an operation still waiting lets the
  //     others progress, so an earlier operation's hold on the same stream
  //     cannot deadlock a later one);
  //  2. takes fence() after enqueuing a burst's copies/reductions/codec
  //     calls and keeps that burst's fifo slots (no recvConsume, no
  //     sendCommit) until done(fence), polling it between other work like a
  //     socket;
  //  3. calls end() once the operation's last fence is done (and on every
  //     failure path: the caller's stream must never wait forever).
  // Fences are ordered: done(f) implies done(e) for every e <= f.  A kernel
  // or copy that fails makes error() non-success (sticky, with lastError() a
  // sentence) and done() true, so nothing waits forever on failed work.
  void begin() const {
    follow();
    hold();
  }
  virtual void follow() const {}
  virtual void hold() const {}
  virtual bool ready() const { return true; }
  virtual void end() const {}
  virtual void* stream() const { return nullptr; }
  virtual uint64_t fence() const { return 0; }
  virtual bool done(uint64_t /*fence*/) const { return true; }
  virtual ternResult_t error() const { return ternSuccess; }
  bool async() const { return stream() != nullptr; }
  virtual const char* lastError() const { return ""; }

  // Memory shared with another rank of the host (memory/ipc.h): device
  // allocations, and host ones from ternMemAlloc (memory/shared_host.h).
  // ipcExport: the handle of the allocation that holds p, and p's offset in
  // it (false: this memory cannot be exported).  ipcOpen: a peer's exported
  // allocation mapped in this process, counted by ipcAcquire (the caller
  // releases it with ipcRelease); nullptr and *why when it cannot be
  // (another type's handle, devices that cannot reach each other, the
  // exporter gone).
  virtual bool ipcExport(const void* /*p*/, IpcHandle* /*h*/, uint64_t* /*offset*/) const {
    return false;
  }
  virtual void* ipcOpen(const IpcHandle& /*h*/, std::string* why) const {
    *why = "this rank's buffers are host memory";
    return nullptr;
  }
  // Whether a handle opened earlier names memory its exporter has freed
  // since: the opener may release it (host allocations; others say no).
  virtual bool ipcStale(const IpcHandle& /*h*/) const { return false; }
};

// The operations of a memory type; nullptr when this build cannot handle it
// (and for MemType::Cuda: device operations are bound to a stream, below).
const MemOps* memOps(MemType t);
// Device operations for a call on the caller's `stream` (a cudaStream_t;
// null is CUDA's legacy default stream), one object per operation (its
// fences, work stream and hold are its own).  nullptr in a build without CUDA or on a machine without a usable
// device.  Implemented in cuda_ops.cu.
// `device`: the CUDA device the buffers live on (-1: the calling thread's);
// every call sets it on the thread that makes it (the executor's threads).
std::unique_ptr<MemOps> makeCudaOps(void* stream, int device = -1);
// The operations of one call with buffers of type `t` on the caller's
// `stream`: makeCudaOps for Cuda, the simulated device's for Simulated,
// nullptr for Host (memOps(Host) serves every host call).
std::unique_ptr<MemOps> makeStreamOps(MemType t, void* stream, int device);

}  // namespace tern
