// CUDA ternary codec (built when nvcc is found: TERN_WITH_CUDA).  The same
// element math as the CPU (ternary_math.h), so results are bit-identical.
// Buffers are device memory; work is ordered on `stream` (a cudaStream_t).
#pragma once
#include <cstddef>
#include <cstdint>

#include "codec/ternary_cpu.h"
#include "codec/ternary_math.h"
#include "tern/tern.h"

namespace tern {

struct TernaryDeviceInput {
  const void* g;          // device: the gradient (float32, float16, bfloat16)
  ternDataType_t dt;
  size_t count;
  const float* scales;    // device: one per block
  uint32_t block;         // multiple of 64
  TernaryKey key;
  float* residual = nullptr;  // device: error feedback (TernaryInput::residual)
};

// The same fields, from the CPU codec's input (pointers then name device memory).
inline TernaryDeviceInput ternaryDeviceInput(const TernaryInput& in) {
  return {in.g, in.dt, in.count, in.scales, in.block, in.key, in.residual};
}

// out (device, 2 words per group) = codes of groups [g0, g0 + n); with
// in.residual, those groups' residuals are updated in the same kernel.
int ternaryCudaEncode(const TernaryDeviceInput& in, size_t g0, size_t n, uint32_t* out,
                      void* stream);
// out = planes (win words per group) + codes, at wout words per group.
int ternaryCudaAddEncode(const TernaryDeviceInput& in, size_t g0, size_t n,
                         const uint32_t* planes, int win, uint32_t* out, int wout, void* stream);
// dst (device, dt) = decode of n groups of width w starting at group g0.
int ternaryCudaDecode(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                      uint32_t block, size_t count, ternDataType_t dt, int avgN, void* dst,
                      void* stream);
// The encode kernels' units of 4 groups per warp (1, 2 or 4; 2 by default):
// more keep more loads in flight per thread, at more registers.  For the
// check that times each (perf/gpu/ternary_gpu_check); false for another value.
bool ternaryCudaSetUnits(int units);
// Loads the kernels above now rather than at their first launch
// (cudaPreloadReduceKernels says why); the cudaError_t as an int.
int ternaryCudaPreload();

}  // namespace tern
