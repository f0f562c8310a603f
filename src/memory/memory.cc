#include "memory/memory.h"

#include <cstring>
#include <new>

#include "memory/host_reduce.h"
#include "memory/shared_host.h"
#include "memory/simulated.h"

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
  void scale(void* dst, const void* src, size_t count, ternDataType_t dt,
             const void* scalar) const override {
    scaleKernel(dst, src, count, dt, scalar);
  }
  const TernaryKernels& ternary() const override { return ternaryKernels(); }
  void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                         float* maxAbs, float* sumSq) const override {
    tern::ternaryBlockStats(g, dt, count, block, maxAbs, sumSq);
  }
  std::shared_ptr<float> persistentZeros(size_t count) const override {
    return std::shared_ptr<float>(new (std::nothrow) float[count](), std::default_delete<float[]>());
  }
  // Host buffers from ternMemAlloc: a peer on this host maps them.
  bool ipcExport(const void* p, IpcHandle* h, uint64_t* offset) const override {
    return shared_host::exportOf(p, h, offset);
  }
  void* ipcOpen(const IpcHandle& h, std::string* why) const override {
    return ipcAcquire(
        h, [&h](std::string* w) { return shared_host::open(h, w); }, shared_host::close, why);
  }
  bool ipcStale(const IpcHandle& h) const override { return shared_host::stale(h); }
};

}  // namespace

const char* memTypeName(MemType t) {
  return t == MemType::Host ? "host" : t == MemType::Cuda ? "cuda" : "simulated device";
}

const MemOps* memOps(MemType t) {
  static const HostOps host;
  return t == MemType::Host ? &host : nullptr;  // CUDA: makeCudaOps(stream)
}

std::unique_ptr<MemOps> makeStreamOps(MemType t, void* stream, int device) {
  if (t == MemType::Cuda) return makeCudaOps(stream, device);
  if (t == MemType::Simulated) return sim::makeOps(stream);
  return nullptr;
}

#ifndef TERN_WITH_CUDA
std::unique_ptr<MemOps> makeCudaOps(void*, int) { return nullptr; }
#endif

}  // namespace tern
