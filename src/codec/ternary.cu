// CUDA kernels of the ternary codec.  A warp covers two 64-element
// super-groups (4 groups of 32): thread t runs Philox block 16 * sg + t % 16
// once, which by the element mapping of ternary_math.h gives the draws of
// elements 64 sg + 16 j + t % 16, j = 0..3; __ballot_sync turns the 4 x 32
// comparisons into the nz / neg words of the 4 groups; lanes 0..3 then do the
// bit-sliced add for one group each.
#include <cuda_runtime.h>

#include "codec/ternary_cuda.h"

namespace tern {

namespace {

__device__ inline float loadElem(const void* g, ternDataType_t dt, size_t i) {
  if (dt == ternFloat16) return halfToFloat(static_cast<const uint16_t*>(g)[i]);
  if (dt == ternBfloat16) return bf16ToFloat(static_cast<const uint16_t*>(g)[i]);
  return static_cast<const float*>(g)[i];
}

// Masks of the 4 groups this warp owns (groups 4 * warp + 0..3, relative to
// the super-group pair starting at group q0).  Every lane gets all of them.
__device__ inline void warpMasks(const TernaryDeviceInput& in, size_t q0, uint32_t nz[4],
                                 uint32_t neg[4]) {
  const int lane = threadIdx.x % 32;
  const size_t sg = q0 / 2 + lane / 16;  // super-group of this half-warp
  uint32_t r[4];
  ternaryBlockDraws(in.key, 16 * sg + lane % 16, r);
  uint32_t bz[4], bn[4];
  for (int j = 0; j < 4; ++j) {
    size_t i = 64 * sg + 16 * j + lane % 16;
    int t = 0;
    if (i < in.count) t = ternaryCode(loadElem(in.g, in.dt, i), in.scales[i / in.block], r[j]);
    bz[j] = __ballot_sync(0xffffffffu, t != 0);
    bn[j] = __ballot_sync(0xffffffffu, t < 0);
  }
  // Half h of the ballots is super-group h; its groups are words (0,1) and (2,3).
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 2; ++k) {
      int sh = 16 * h;
      nz[2 * h + k] = ((bz[2 * k] >> sh) & 0xffffu) | (((bz[2 * k + 1] >> sh) & 0xffffu) << 16);
      neg[2 * h + k] = ((bn[2 * k] >> sh) & 0xffffu) | (((bn[2 * k + 1] >> sh) & 0xffffu) << 16);
    }
}

// One kernel for encode (planes == nullptr) and fused add-encode.  The range
// [g0, g0 + n) may start or end mid super-group: those groups are computed
// and simply not stored.
__global__ void addEncodeKernel(TernaryDeviceInput in, size_t g0, size_t n,
                                const uint32_t* planes, int win, uint32_t* out, int wout) {
  const size_t warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const size_t q0 = (g0 / 4) * 4 + 4 * warp;  // first of this warp's 4 groups
  if (q0 >= g0 + n) return;  // whole warp leaves together: ballots stay full
  uint32_t nz[4], neg[4];
  warpMasks(in, q0, nz, neg);
  const int lane = threadIdx.x % 32;
  if (lane < 4) {
    size_t q = q0 + lane;
    if (q >= g0 && q < g0 + n) {
      size_t k = q - g0;
      planesAddCode(planes ? planes + win * k : nullptr, planes ? win : 0, nz[lane], neg[lane],
                    out + wout * k, wout);
    }
  }
}

__global__ void decodeKernel(const uint32_t* planes, int w, size_t g0, size_t n,
                             const float* scales, uint32_t block, size_t count, ternDataType_t dt,
                             int avgN, void* dst) {
  size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;  // element of the range
  if (e >= 32 * n) return;
  size_t i = 32 * g0 + e;
  if (i >= count) return;
  const uint32_t* p = planes + w * (e / 32);
  float v = ternaryDecode(planesLane(p, w, static_cast<int>(e % 32)), scales[i / block], avgN);
  if (dt == ternFloat16) static_cast<uint16_t*>(dst)[i] = floatToHalf(v);
  else if (dt == ternBfloat16) static_cast<uint16_t*>(dst)[i] = floatToBf16(v);
  else static_cast<float*>(dst)[i] = v;
}

int launchAddEncode(const TernaryDeviceInput& in, size_t g0, size_t n, const uint32_t* planes,
                    int win, uint32_t* out, int wout, void* stream) {
  if (n == 0) return 0;
  size_t warps = ((g0 + n + 3) / 4) - g0 / 4;
  const int threads = 256;
  size_t blocks = (warps * 32 + threads - 1) / threads;
  addEncodeKernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      in, g0, n, planes, win, out, wout);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int ternaryCudaEncode(const TernaryDeviceInput& in, size_t g0, size_t n, uint32_t* out,
                      void* stream) {
  return launchAddEncode(in, g0, n, nullptr, 0, out, 2, stream);
}

int ternaryCudaAddEncode(const TernaryDeviceInput& in, size_t g0, size_t n,
                         const uint32_t* planes, int win, uint32_t* out, int wout, void* stream) {
  return launchAddEncode(in, g0, n, planes, win, out, wout, stream);
}

int ternaryCudaDecode(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                      uint32_t block, size_t count, ternDataType_t dt, int avgN, void* dst,
                      void* stream) {
  if (n == 0) return 0;
  const int threads = 256;
  size_t blocks = (32 * n + threads - 1) / threads;
  decodeKernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      planes, w, g0, n, scales, block, count, dt, avgN, dst);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tern
