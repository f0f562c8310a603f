// CUDA kernels of the ternary codec.  A warp covers two 64-element
// super-groups (4 groups of 32): thread t runs Philox block 16 * sg + t % 16
// once, which by the element mapping of ternary_math.h gives the draws of
// elements 64 sg + 16 j + t % 16, j = 0..3; __ballot_sync turns the 4 x 32
// comparisons into the nz / neg words of the 4 groups; lanes 0..3 then do the
// bit-sliced add for one group each.  With error feedback each thread also
// reads and rewrites the residuals of its 4 elements, for the groups the
// launch encodes (the others' codes are computed and dropped).
#include <cuda_runtime.h>

#include "codec/ternary_cuda.h"

namespace tern {

namespace {

// Block of element i: a shift for power-of-two block sizes (the default), as
// a 64-bit division costs more than the rest of the element's work.
__device__ inline size_t blockOf(size_t i, uint32_t block, int shift) {
  return shift >= 0 ? i >> shift : i / block;
}

__device__ inline float loadElem(const void* g, ternDataType_t dt, size_t i) {
  if (dt == ternFloat16) return halfToFloat(static_cast<const uint16_t*>(g)[i]);
  if (dt == ternBfloat16) return bf16ToFloat(static_cast<const uint16_t*>(g)[i]);
  return static_cast<const float*>(g)[i];
}

// Masks of the 4 groups this warp owns (groups 4 * warp + 0..3, relative to
// the super-group pair starting at group q0).  Every lane gets all of them.
// Residuals are read and written for groups [g0, gEnd) only.
__device__ inline void warpMasks(const TernaryDeviceInput& in, int shift, size_t q0, size_t g0,
                                 size_t gEnd, uint32_t nz[4], uint32_t neg[4]) {
  const int lane = threadIdx.x % 32;
  const size_t sg = q0 / 2 + lane / 16;  // super-group of this half-warp
  uint32_t r[4];
  ternaryBlockDraws(in.key, 16 * sg + lane % 16, r);
  uint32_t bz[4], bn[4];
  const float s = 64 * sg < in.count ? in.scales[blockOf(64 * sg, in.block, shift)] : 0.0f;
  for (int j = 0; j < 4; ++j) {  // a super-group never spans two blocks (block % 64 == 0)
    size_t i = 64 * sg + 16 * j + lane % 16;
    int t = 0;
    if (i < in.count) {
      float v = loadElem(in.g, in.dt, i);
      const bool feedBack = in.residual && i / 32 >= g0 && i / 32 < gEnd;
      if (feedBack) v = __fadd_rn(v, in.residual[i]);
      t = ternaryCode(v, s, r[j]);
      if (feedBack) in.residual[i] = ternaryResidual(v, s, t);
    }
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
// and simply not stored.  (Staging the planes through shared memory for
// coalesced access measured slower: 59% vs 63% of copy bandwidth on H100.)
constexpr int kWarpsPerBlock = 8;

__global__ void addEncodeKernel(TernaryDeviceInput in, int shift, size_t g0, size_t n,
                                const uint32_t* planes, int win, uint32_t* out, int wout) {
  const size_t warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const size_t q0 = (g0 / 4) * 4 + 4 * warp;  // first of this warp's 4 groups
  if (q0 >= g0 + n) return;  // whole warp leaves together: ballots stay full
  uint32_t nz[4], neg[4];
  warpMasks(in, shift, q0, g0, g0 + n, nz, neg);
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

// Four consecutive elements per thread (one 16-byte store for float32);
// 32-bit arithmetic inside the range, which launches keep below 2^31 groups.
__global__ void decodeKernel(const uint32_t* planes, int w, size_t g0, size_t n,
                             const float* scales, uint32_t block, int shift, size_t count,
                             ternDataType_t dt, int avgN, void* dst) {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t e0 = 4 * t;  // first element of this thread, relative to the range
  if (e0 >= 32 * n) return;
  const size_t i0 = 32 * g0 + e0;
  if (i0 >= count) return;
  const uint32_t* p = planes + static_cast<size_t>(w) * (e0 / 32);
  uint32_t words[kTernaryMaxWidth];
  for (int j = 0; j < w; ++j) words[j] = p[j] >> (e0 % 32);  // lanes e0%32 .. +3 at bits 0..3
  const float s = scales[blockOf(i0, block, shift)];  // 4 elements never span two blocks
  float v[4];
  for (int k = 0; k < 4; ++k) v[k] = ternaryDecode(planesLane(words, w, k), s, avgN);
  if (dt == ternFloat32 && i0 + 4 <= count && reinterpret_cast<uintptr_t>(static_cast<float*>(dst) + i0) % 16 == 0) {
    reinterpret_cast<float4*>(static_cast<float*>(dst) + i0)[0] = make_float4(v[0], v[1], v[2], v[3]);
    return;
  }
  for (int k = 0; k < 4 && i0 + k < count; ++k) {
    if (dt == ternFloat16) static_cast<uint16_t*>(dst)[i0 + k] = floatToHalf(v[k]);
    else if (dt == ternBfloat16) static_cast<uint16_t*>(dst)[i0 + k] = floatToBf16(v[k]);
    else static_cast<float*>(dst)[i0 + k] = v[k];
  }
}

int shiftOf(uint32_t block) {
  return (block & (block - 1)) == 0 ? __builtin_ctz(block) : -1;
}

int launchAddEncode(const TernaryDeviceInput& in, size_t g0, size_t n, const uint32_t* planes,
                    int win, uint32_t* out, int wout, void* stream) {
  if (n == 0) return 0;
  size_t warps = ((g0 + n + 3) / 4) - g0 / 4;
  const int threads = 32 * kWarpsPerBlock;
  size_t blocks = (warps * 32 + threads - 1) / threads;
  addEncodeKernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      in, shiftOf(in.block), g0, n, planes, win, out, wout);
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
  size_t blocks = (8 * n + threads - 1) / threads;  // 8 threads per group
  decodeKernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      planes, w, g0, n, scales, block, shiftOf(block), count, dt, avgN, dst);
  return static_cast<int>(cudaGetLastError());
}

int ternaryCudaPreload() {
  cudaFuncAttributes fa;
  cudaFuncGetAttributes(&fa, addEncodeKernel);
  cudaFuncGetAttributes(&fa, decodeKernel);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tern
