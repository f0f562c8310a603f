// The CUDA codec as a TernaryKernels table, for callers that hold the table
// rather than the operation's MemOps.  In memory/, not codec/: its block
// statistics are memory's kernel (cuda_reduce.h), and codec includes
// nothing of memory.  A function pointer cannot carry a
// stream, so each call waits for all the device's work, runs on the legacy
// default stream and waits again: correct on any stream (blocking or not),
// slow.  The data path calls MemOps::ternaryEncode/AddEncode/Decode instead,
// which order the same kernels on the operation's stream without waiting.
#include <cuda_runtime.h>

#include "base/log.h"
#include "codec/ternary_cpu.h"
#include "codec/ternary_cuda.h"
#include "memory/cuda_reduce.h"
#include "memory/ternary_sync_table.h"

namespace tern {

namespace {

// Waits for the device around `launch` (cudaError_t as int, 0 = launched).
template <class Launch>
void synchronously(const char* what, Launch launch) {
  int e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = launch();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    TERN_LOG(Warn, "CUDA ternary %s failed: %s", what, cudaGetErrorString(static_cast<cudaError_t>(e)));
}

void encode(const TernaryInput& in, size_t g0, size_t n, uint32_t* out) {
  synchronously("encode", [&] { return ternaryCudaEncode(ternaryDeviceInput(in), g0, n, out, nullptr); });
}

void addEncode(const TernaryInput& in, size_t g0, size_t n, const uint32_t* planes, int win,
               uint32_t* out, int wout) {
  synchronously("add-encode", [&] {
    return ternaryCudaAddEncode(ternaryDeviceInput(in), g0, n, planes, win, out, wout, nullptr);
  });
}

void decode(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
            uint32_t block, size_t count, ternDataType_t dt, int avgN, void* dst) {
  synchronously("decode", [&] {
    return ternaryCudaDecode(planes, w, g0, n, scales, block, count, dt, avgN, dst, nullptr);
  });
}

// Device gradient, host results, as CudaOps::ternaryBlockStats gives them.
void blockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block, float* maxAbs,
                float* sumSq) {
  const size_t bytes = (count + block - 1) / block * sizeof(float);
  float *m = nullptr, *q = nullptr;
  synchronously("block stats", [&] {
    int e = cudaMalloc(&m, bytes);
    if (e == cudaSuccess && sumSq) e = cudaMalloc(&q, bytes);
    if (e == cudaSuccess) e = cudaBlockStats(g, dt, count, block, m, q, nullptr);
    if (e == cudaSuccess) e = cudaMemcpy(maxAbs, m, bytes, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && sumSq) e = cudaMemcpy(sumSq, q, bytes, cudaMemcpyDeviceToHost);
    return e;
  });
  cudaFree(m);
  cudaFree(q);
}

}  // namespace

const TernaryKernels& ternaryCudaSyncKernels() {
  static const TernaryKernels k{"cuda-sync", encode, addEncode, decode, blockStats};
  return k;
}

}  // namespace tern
