#include "memory/memory.h"

#include <cstring>

#include "memory/host_reduce.h"

namespace tern {

namespace {

class HostOps : public MemOps {
 public:
  MemType type() const override { return MemType::Host; }
  void copy(void* dst, const void* src, size_t bytes) const override { memcpy(dst, src, bytes); }
  void reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
              ternRedOp_t op, int avgDivisor) const override {
    reduceKernel(dst, a, b, count, dt, op, avgDivisor);
  }
  void divide(void* buf, size_t count, ternDataType_t dt, int divisor) const override {
    divideKernel(buf, count, dt, divisor);
  }
  const TernaryKernels& ternary() const override { return ternaryKernels(); }
};

}  // namespace

const char* memTypeName(MemType t) { return t == MemType::Host ? "host" : "cuda"; }

MemType memTypeFor(const void* stream) { return stream ? MemType::Cuda : MemType::Host; }

const MemOps* memOps(MemType t) {
  static const HostOps host;
  return t == MemType::Host ? &host : nullptr;  // CUDA: with the GPU data path
}

}  // namespace tern
