// Memory types: where an operation's buffers live decides how its bytes are
// copied, reduced and ternary-coded (UCC's mc/ec split).  Plans and the
// executor never touch user memory directly: every copy, reduction and codec
// call goes through the operation's MemOps, so host code never dereferences a
// device pointer.  Host memory (synchronous) and, in builds with CUDA, device
// memory (kernels on the operation's stream, asynchronous: see "Async
// contract" below and docs/ARCHITECTURE.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "codec/ternary_cpu.h"
#include "tern/tern.h"

namespace tern {

enum class MemType { Host = 0, Cuda = 1 };
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
  // The ternary codec's kernels for this memory.
  virtual const TernaryKernels& ternary() const = 0;
  // Ternary allreduce, the passes over the caller's gradient besides the
  // codec: per-block max |g| (and sum of g^2 when sumSq is not null), and
  // out = g + residual as float32 (error feedback).
  virtual void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                                 float* maxAbs, float* sumSq) const = 0;
  virtual void ternaryCorrect(const void* g, ternDataType_t dt, const float* residual, size_t count,
                              float* out) const = 0;

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
  //  1. calls begin() before the operation's first step: the work stream
  //     then waits (on the device) for what the caller put on its stream
  //     earlier, and the caller's stream waits for end();
  //  2. takes fence() after enqueuing a burst's copies/reductions/codec
  //     calls and keeps that burst's fifo slots (no recvConsume, no
  //     sendCommit) until done(fence), polling it between other work like a
  //     socket;
  //  3. calls end() once the operation's last fence is done (and on every
  //     failure path: the caller's stream must never wait forever).
  // Fences are ordered: done(f) implies done(e) for every e <= f.  A kernel
  // or copy that fails makes error() non-success (sticky, with lastError() a
  // sentence) and done() true, so nothing waits forever on failed work.
  virtual void begin() const {}
  virtual void end() const {}
  virtual void* stream() const { return nullptr; }
  virtual uint64_t fence() const { return 0; }
  virtual bool done(uint64_t /*fence*/) const { return true; }
  virtual ternResult_t error() const { return ternSuccess; }
  virtual const char* lastError() const { return ""; }
};

// The memory type of an operation: device buffers come with a stream (as in
// NCCL); without one they are host memory.
MemType memTypeFor(const void* stream);
// The operations of a memory type; nullptr when this build cannot handle it
// (and for MemType::Cuda: device operations are bound to a stream, below).
const MemOps* memOps(MemType t);
// Device operations for a call on the caller's `stream` (a cudaStream_t;
// null is CUDA's legacy default stream), one object per operation (its
// fences, work stream and hold are its own).  nullptr in a build without CUDA or on a machine without a usable
// device.  Implemented in cuda_ops.cu.
std::unique_ptr<MemOps> makeCudaOps(void* stream);

}  // namespace tern
