// Memory types: where an operation's buffers live decides how its bytes are
// copied, reduced and ternary-coded (UCC's mc/ec split).  Plans and the
// executor never touch user memory directly: every copy, reduction and codec
// call goes through the operation's MemOps, so host code never dereferences a
// device pointer.  Host memory now; the CUDA memory type plugs in here with
// the GPU data path (streams, staging through pinned buffers).
#pragma once
#include <cstddef>

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
};

// The memory type of an operation: device buffers come with a stream (as in
// NCCL); without one they are host memory.
MemType memTypeFor(const void* stream);
// The operations of a memory type; nullptr when this build cannot handle it.
const MemOps* memOps(MemType t);

}  // namespace tern
