// CUDA's view of this machine and of a pointer.  libtern links the CUDA
// runtime statically; the runtime loads libcuda itself on first use, so on
// a machine without a driver (or without a device) the first call fails
// with cudaErrorInsufficientDriver / cudaErrorNoDevice and everything here
// answers "host" instead of failing.
#include <cuda_runtime.h>

#include "base/log.h"
#include "memory/buffer_kind.h"
#include "memory/cuda_runtime_probe.h"
#include "memory/staging_pool.h"

namespace tern {

bool cudaUsable() {
  static const bool usable = [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it for whoever asks next
      TERN_LOG(Info, "no CUDA device usable (%s): every buffer is host memory",
               cudaGetErrorString(e));
      return false;
    }
    return n > 0;
  }();
  return usable;
}

void* driverFunction(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

MemType pointerKindOn(const void* p, int* device) {
  *device = -1;
  if (!p || !cudaUsable()) return MemType::Host;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return MemType::Host;
  }
  // Pinned and registered host memory (cudaMemoryTypeHost) is host memory
  // the CPU may touch; managed memory is treated as device memory because
  // kernels on the stream may be touching it.
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return MemType::Host;
  *device = a.device;
  return MemType::Cuda;
}

MemType pointerKind(const void* p) {
  int device;
  return pointerKindOn(p, &device);
}

namespace {

void* pinnedAlloc(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void pinnedRelease(void* p) { cudaFreeHost(p); }

}  // namespace

StagingPool* pinnedStagingPool() {
  if (!cudaUsable()) return nullptr;
  // Never destroyed: at exit the CUDA runtime may already be gone, and the
  // driver frees pinned memory with the process.
  static StagingPool* pool = new StagingPool({pinnedAlloc, pinnedRelease});
  return pool;
}

}  // namespace tern
