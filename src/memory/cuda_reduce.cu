// Reductions and the ternary allreduce's passes over the gradient, as CUDA
// kernels.  Grid-stride loops over elements; the operation of each element
// is reduce_ops.h's, so host and device agree bit for bit.
#include <cuda_runtime.h>

#include "codec/ternary_math.h"
#include "memory/cuda_reduce.h"
#include "memory/reduce_ops.h"

namespace tern {

namespace {

constexpr int kThreads = 256;

unsigned gridFor(size_t n) {
  size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks ? blocks : 1) : 65536);
}

__device__ inline size_t firstIndex() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }
__device__ inline size_t strideAll() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

// Bcast: b is one element (device memory), applied to every a[i] (a
// PreMulSum's scaling, read on the stream when the kernel runs).
template <class T, class Op, bool Bcast>
__global__ void reduceNative(T* d, const T* a, const T* b, size_t n, int div) {
  for (size_t i = firstIndex(); i < n; i += strideAll())
    d[i] = reduceElem<Op>(a[i], b[Bcast ? 0 : i], div);
}

template <class Op, bool Bf16, bool Bcast>
__global__ void reduceHalf(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, int div) {
  for (size_t i = firstIndex(); i < n; i += strideAll()) {
    const uint16_t y = b[Bcast ? 0 : i];
    d[i] = Bf16 ? reduceElem16<Op, bf16ToFloat, floatToBf16>(a[i], y, div)
                : reduceElem16<Op, halfToFloat, floatToHalf>(a[i], y, div);
  }
}

// Launches kernel k over n elements; n == 0 (only cudaPreloadReduceKernels
// asks for none) loads it instead (cudaFuncGetAttributes), so that the
// dispatch below names every kernel once, for both.
template <class... P, class... A>
void launchOrLoad(void (*k)(P...), size_t n, cudaStream_t s, A... args) {
  if (n == 0) {
    cudaFuncAttributes fa;
    cudaFuncGetAttributes(&fa, k);
    return;
  }
  k<<<gridFor(n), kThreads, 0, s>>>(args...);
}

template <class T, class Op, bool Bcast>
void native(void* d, const void* a, const void* b, size_t n, int div, cudaStream_t s) {
  launchOrLoad(reduceNative<T, Op, Bcast>, n, s, static_cast<T*>(d), static_cast<const T*>(a),
               static_cast<const T*>(b), n, div);
}

template <class Op, bool Bf16, bool Bcast>
void half16(void* d, const void* a, const void* b, size_t n, int div, cudaStream_t s) {
  launchOrLoad(reduceHalf<Op, Bf16, Bcast>, n, s, static_cast<uint16_t*>(d),
               static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n, div);
}

template <class Op, bool Bcast = false>
bool launchType(void* d, const void* a, const void* b, size_t n, ternDataType_t dt, int div,
                cudaStream_t s) {
  switch (dt) {
    case ternInt8: native<int8_t, Op, Bcast>(d, a, b, n, div, s); return true;
    case ternUint8: native<uint8_t, Op, Bcast>(d, a, b, n, div, s); return true;
    case ternInt32: native<int32_t, Op, Bcast>(d, a, b, n, div, s); return true;
    case ternUint32: native<uint32_t, Op, Bcast>(d, a, b, n, div, s); return true;
    case ternInt64: native<int64_t, Op, Bcast>(d, a, b, n, div, s); return true;
    case ternUint64: native<uint64_t, Op, Bcast>(d, a, b, n, div, s); return true;
    case ternFloat32: native<float, Op, Bcast>(d, a, b, n, div, s); return true;
    case ternFloat64: native<double, Op, Bcast>(d, a, b, n, div, s); return true;
    case ternFloat16: half16<Op, false, Bcast>(d, a, b, n, div, s); return true;
    case ternBfloat16: half16<Op, true, Bcast>(d, a, b, n, div, s); return true;
    default: return false;
  }
}

__device__ inline float loadAsFloat(const void* g, ternDataType_t dt, size_t i) {
  if (dt == ternFloat16) return halfToFloat(static_cast<const uint16_t*>(g)[i]);
  if (dt == ternBfloat16) return bf16ToFloat(static_cast<const uint16_t*>(g)[i]);
  return static_cast<const float*>(g)[i];
}

// One CUDA block per scale block.  The max is exact in any order; the sum
// of squares repeats the host's order (ternary_cpu.cc: 16 lanes over the
// float32 body, the rest into lane 0, lanes added 0..15) with rounded,
// never fused, multiply and add.
__global__ void blockStatsKernel(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                                 float* maxAbs, float* sumSq) {
  __shared__ float sm[kThreads];
  __shared__ float sq[16];
  const size_t lo = blockIdx.x * static_cast<size_t>(block);
  const size_t hi = lo + block < count ? lo + block : count;
  const unsigned t = threadIdx.x;
  float m = 0;
  for (size_t i = lo + t; i < hi; i += blockDim.x) {
    float a = fabsf(loadAsFloat(g, dt, i));
    m = a > m ? a : m;
  }
  sm[t] = m;
  __syncthreads();
  for (unsigned s = kThreads / 2; s > 0; s >>= 1) {
    if (t < s) sm[t] = sm[t + s] > sm[t] ? sm[t + s] : sm[t];
    __syncthreads();
  }
  if (t == 0) maxAbs[blockIdx.x] = sm[0];
  if (!sumSq) return;
  const size_t body = dt == ternFloat32 ? lo + (hi - lo) / 16 * 16 : lo;
  if (t < 16) {
    float s = 0;
    for (size_t i = lo + t; i < body; i += 16) {
      float a = fabsf(static_cast<const float*>(g)[i]);
      s = __fadd_rn(s, __fmul_rn(a, a));
    }
    sq[t] = s;
  }
  __syncthreads();
  if (t != 0) return;
  for (size_t i = body; i < hi; ++i) {
    float a = fabsf(loadAsFloat(g, dt, i));
    sq[0] = __fadd_rn(sq[0], __fmul_rn(a, a));
  }
  float ss = 0;
  for (int l = 0; l < 16; ++l) ss = __fadd_rn(ss, sq[l]);
  sumSq[blockIdx.x] = ss;
}

int launched(bool ok) { return ok ? static_cast<int>(cudaGetLastError()) : cudaErrorInvalidValue; }

}  // namespace

int cudaReduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
               ternRedOp_t op, int avgDivisor, void* stream) {
  if (count == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (op) {
    case ternSum: return launched(launchType<Sum>(dst, a, b, count, dt, 0, s));
    case ternAvg: return launched(launchType<Sum>(dst, a, b, count, dt, avgDivisor, s));
    case ternProd: return launched(launchType<Prod>(dst, a, b, count, dt, 0, s));
    case ternMax: return launched(launchType<Max>(dst, a, b, count, dt, 0, s));
    case ternMin: return launched(launchType<Min>(dst, a, b, count, dt, 0, s));
    default: return cudaErrorInvalidValue;
  }
}

int cudaDivide(void* buf, size_t count, ternDataType_t dt, int divisor, void* stream) {
  if (count == 0) return 0;
  return launched(launchType<First>(buf, buf, buf, count, dt, divisor,
                                    static_cast<cudaStream_t>(stream)));
}

int cudaScale(void* dst, const void* src, size_t count, ternDataType_t dt, const void* scalar,
              void* stream) {
  if (count == 0) return 0;
  return launched(launchType<Prod, true>(dst, src, scalar, count, dt, 0,
                                         static_cast<cudaStream_t>(stream)));
}

int cudaBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block, float* maxAbs,
                   float* sumSq, void* stream) {
  size_t blocks = (count + block - 1) / block;
  if (blocks == 0) return 0;
  blockStatsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      g, dt, count, block, maxAbs, sumSq);
  return static_cast<int>(cudaGetLastError());
}

int cudaPreloadReduceKernels() {
  for (int t = 0; t < ternNumTypes; ++t) {
    const auto dt = static_cast<ternDataType_t>(t);
    launchType<Sum>(nullptr, nullptr, nullptr, 0, dt, 0, nullptr);
    launchType<Prod>(nullptr, nullptr, nullptr, 0, dt, 0, nullptr);
    launchType<Max>(nullptr, nullptr, nullptr, 0, dt, 0, nullptr);
    launchType<Min>(nullptr, nullptr, nullptr, 0, dt, 0, nullptr);
    launchType<First>(nullptr, nullptr, nullptr, 0, dt, 0, nullptr);  // cudaDivide
    launchType<Prod, true>(nullptr, nullptr, nullptr, 0, dt, 0, nullptr);  // cudaScale
  }
  cudaFuncAttributes fa;
  cudaFuncGetAttributes(&fa, blockStatsKernel);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tern
