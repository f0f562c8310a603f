// CUDA kernels of the ternary codec.  A warp covers two 64-element
// super-groups (4 groups of 32): thread t runs Philox block 16 * sg + t % 16
// once, which by the element mapping of ternary_math.h gives the draws of
// elements 64 sg + 16 j + t % 16, j = 0..3; __ballot_sync turns the 4 x 32
// comparisons into the nz / neg words of the 4 groups; lanes 0..3 then do the
// bit-sliced add for one group each.  With error feedback each thread also
// reads and rewrites the residuals of its 4 elements, for the groups the
// launch encodes (the others' codes are computed and dropped).
#include <cuda_runtime.h>

#include <atomic>
#include <utility>

#include "codec/ternary_cuda.h"

namespace tern {

namespace {

// Block of element i: a shift for power-of-two block sizes (the default), as
// a 64-bit division costs more than the rest of the element's work.
__device__ inline size_t blockOf(size_t i, uint32_t block, int shift) {
  return shift >= 0 ? i >> shift : i / block;
}

// The element type is a template parameter, and so are error feedback and
// the decode width: every array below is indexed by constants after
// unrolling and stays in registers.  (Indexed by the lane or a runtime width,
// as they were, they went to local memory: 32 and 40 bytes of stack per
// thread, and 43-67% of the copy rate on an H200; perf/RESULTS.md,
// 2026-11-27: GPU checks on an H200.)
template <ternDataType_t DT>
__device__ inline float loadElem(const void* g, size_t i) {
  if (DT == ternFloat16) return halfToFloat(static_cast<const uint16_t*>(g)[i]);
  if (DT == ternBfloat16) return bf16ToFloat(static_cast<const uint16_t*>(g)[i]);
  return static_cast<const float*>(g)[i];
}

// Units of 4 groups (two super-groups) per warp: their loads are all issued
// before the first Philox round, so each thread has 4 * Units elements in
// flight while it computes.  2 measured 58.6% of copy on an H200 where one
// unit without the other changes measured 48.5% (2026-12-04); 1, 2 and 4
// are built, ternaryCudaSetUnits picks one (ternary_gpu_check times each).
constexpr int kUnitChoices[] = {1, 2, 4};
std::atomic<int> gUnits{2};
constexpr int kWarpsPerBlock = 8;

// One unit's inputs for this lane: elements 64 sg + 16 j + lane % 16.
struct UnitLoad {
  float v[4];
  bool feedBack[4];
};

template <ternDataType_t DT, bool EF>
__device__ inline void loadUnit(const TernaryDeviceInput& in, size_t sg, size_t g0, size_t gEnd,
                                UnitLoad& u) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const size_t i = 64 * sg + 16 * j + lane % 16;
    u.v[j] = i < in.count ? loadElem<DT>(in.g, i) : 0.0f;
    u.feedBack[j] = EF && i < in.count && i / 32 >= g0 && i / 32 < gEnd;
    if (EF && u.feedBack[j]) u.v[j] = __fadd_rn(u.v[j], in.residual[i]);
  }
}

// The codes of one unit; lanes 0..3 get the nz / neg words of group q0 + lane
// (half h of the ballots is super-group h; its groups are words (0,1), (2,3)).
template <bool EF>
__device__ inline void codeUnit(const TernaryDeviceInput& in, int shift, size_t sg,
                                const UnitLoad& u, uint32_t& nz, uint32_t& neg) {
  const int lane = threadIdx.x % 32;
  uint32_t r[4];
  ternaryBlockDraws(in.key, 16 * sg + lane % 16, r);
  const float s = 64 * sg < in.count ? in.scales[blockOf(64 * sg, in.block, shift)] : 0.0f;
  uint32_t bz[4], bn[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // a super-group never spans two blocks (block % 64 == 0)
    const size_t i = 64 * sg + 16 * j + lane % 16;
    const int t = i < in.count ? ternaryCode(u.v[j], s, r[j]) : 0;
    if (EF && u.feedBack[j]) in.residual[i] = ternaryResidual(u.v[j], s, t);
    bz[j] = __ballot_sync(0xffffffffu, t != 0);
    bn[j] = __ballot_sync(0xffffffffu, t < 0);
  }
  const int sh = 16 * ((lane >> 1) & 1);
  const bool odd = lane & 1;
  const uint32_t z0 = odd ? bz[2] : bz[0], z1 = odd ? bz[3] : bz[1];
  const uint32_t n0 = odd ? bn[2] : bn[0], n1 = odd ? bn[3] : bn[1];
  nz = ((z0 >> sh) & 0xffffu) | (((z1 >> sh) & 0xffffu) << 16);
  neg = ((n0 >> sh) & 0xffffu) | (((n1 >> sh) & 0xffffu) << 16);
}

// One kernel for encode (planes == nullptr) and fused add-encode.  The range
// [g0, g0 + n) may start or end mid super-group: those groups are computed
// and simply not stored.  (Staging the planes through shared memory for
// coalesced access measured slower: 59% vs 63% of copy bandwidth on H100.)
template <ternDataType_t DT, bool EF, int Units>
__global__ void addEncodeKernel(TernaryDeviceInput in, int shift, size_t g0, size_t n,
                                const uint32_t* planes, int win, uint32_t* out, int wout) {
  const size_t warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const size_t first = (g0 / 4) * 4 + 4 * Units * warp;  // first of this warp's groups
  const size_t gEnd = g0 + n;
  if (first >= gEnd) return;  // whole warp leaves together: ballots stay full
  const int lane = threadIdx.x % 32;
  UnitLoad u[Units];
#pragma unroll
  for (int k = 0; k < Units; ++k)  // units past the end are warp-uniform: skipped whole
    if (first + 4 * k < gEnd) loadUnit<DT, EF>(in, (first + 4 * k) / 2 + lane / 16, g0, gEnd, u[k]);
#pragma unroll
  for (int k = 0; k < Units; ++k) {
    const size_t q0 = first + 4 * k;
    if (q0 >= gEnd) break;
    uint32_t nz, neg;
    codeUnit<EF>(in, shift, q0 / 2 + lane / 16, u[k], nz, neg);
    const size_t q = q0 + lane;
    if (lane < 4 && q >= g0 && q < gEnd) {
      const size_t at = q - g0;
      planesAddCode(planes ? planes + win * at : nullptr, planes ? win : 0, nz, neg,
                    out + wout * at, wout);
    }
  }
}

// Four consecutive elements per thread (one 16-byte store for float32);
// 32-bit arithmetic inside the range, which launches keep below 2^31 groups.
template <int W>
__global__ void decodeKernel(const uint32_t* planes, size_t g0, size_t n, const float* scales,
                             uint32_t block, int shift, size_t count, ternDataType_t dt, int avgN,
                             void* dst) {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t e0 = 4 * t;  // first element of this thread, relative to the range
  if (e0 >= 32 * n) return;
  const size_t i0 = 32 * g0 + e0;
  if (i0 >= count) return;
  const uint32_t* p = planes + static_cast<size_t>(W) * (e0 / 32);
  uint32_t words[W];
#pragma unroll
  for (int j = 0; j < W; ++j) words[j] = p[j] >> (e0 % 32);  // lanes e0%32 .. +3 at bits 0..3
  const float s = scales[blockOf(i0, block, shift)];  // 4 elements never span two blocks
  float v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = ternaryDecode(planesLane(words, W, k), s, avgN);
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

// The decode kernel of width w (2 .. kTernaryMaxWidth), or nullptr.
using DecodeFn = void (*)(const uint32_t*, size_t, size_t, const float*, uint32_t, int, size_t,
                          ternDataType_t, int, void*);
template <int... W>
DecodeFn decodeOfWidth(int w, std::integer_sequence<int, W...>) {
  DecodeFn fns[] = {decodeKernel<W + 2>...};
  return w >= 2 && w < 2 + static_cast<int>(sizeof...(W)) ? fns[w - 2] : nullptr;
}
DecodeFn decodeOfWidth(int w) {
  return decodeOfWidth(w, std::make_integer_sequence<int, kTernaryMaxWidth - 1>());
}

using AddEncodeFn = void (*)(TernaryDeviceInput, int, size_t, size_t, const uint32_t*, int,
                             uint32_t*, int);
template <bool EF, int Units>
AddEncodeFn addEncodeOf(ternDataType_t dt) {
  if (dt == ternFloat16) return addEncodeKernel<ternFloat16, EF, Units>;
  if (dt == ternBfloat16) return addEncodeKernel<ternBfloat16, EF, Units>;
  return addEncodeKernel<ternFloat32, EF, Units>;
}
template <int Units>
AddEncodeFn addEncodeOf(ternDataType_t dt, bool feedBack) {
  return feedBack ? addEncodeOf<true, Units>(dt) : addEncodeOf<false, Units>(dt);
}
AddEncodeFn addEncodeOf(ternDataType_t dt, bool feedBack, int units) {
  if (units == 1) return addEncodeOf<1>(dt, feedBack);
  if (units == 4) return addEncodeOf<4>(dt, feedBack);
  return addEncodeOf<2>(dt, feedBack);
}

int shiftOf(uint32_t block) {
  return (block & (block - 1)) == 0 ? __builtin_ctz(block) : -1;
}

int launchAddEncode(const TernaryDeviceInput& in, size_t g0, size_t n, const uint32_t* planes,
                    int win, uint32_t* out, int wout, void* stream) {
  if (n == 0) return 0;
  const int perWarp = gUnits.load(std::memory_order_relaxed);
  const size_t units = ((g0 + n + 3) / 4) - g0 / 4;
  const size_t warps = (units + perWarp - 1) / perWarp;
  const int threads = 32 * kWarpsPerBlock;
  const size_t blocks = (warps * 32 + threads - 1) / threads;
  addEncodeOf(in.dt, in.residual != nullptr, perWarp)<<<static_cast<unsigned>(blocks), threads, 0,
                                               static_cast<cudaStream_t>(stream)>>>(
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
  const DecodeFn fn = decodeOfWidth(w);
  if (!fn) return static_cast<int>(cudaErrorInvalidValue);
  const int threads = 256;
  size_t blocks = (8 * n + threads - 1) / threads;  // 8 threads per group
  fn<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      planes, g0, n, scales, block, shiftOf(block), count, dt, avgN, dst);
  return static_cast<int>(cudaGetLastError());
}

bool ternaryCudaSetUnits(int units) {
  for (int u : kUnitChoices)
    if (u == units) return gUnits.store(units), true;
  return false;
}

int ternaryCudaPreload() {
  cudaFuncAttributes fa;
  for (ternDataType_t dt : {ternFloat32, ternFloat16, ternBfloat16})
    for (bool feedBack : {false, true})
      for (int units : kUnitChoices) cudaFuncGetAttributes(&fa, addEncodeOf(dt, feedBack, units));
  for (int w = 2; w <= kTernaryMaxWidth; ++w) cudaFuncGetAttributes(&fa, decodeOfWidth(w));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tern
