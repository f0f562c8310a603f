// The scalar reference is written straight from ternary_math.h; the SIMD
// paths compute 16 (AVX-512) or 8 (AVX2) Philox blocks per instruction
// stream, which by the element mapping of ternary_math.h are 64 consecutive
// elements, and turn comparisons into mask words directly.
#include "codec/ternary_cpu.h"

#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>

#include "base/env.h"

// GCC 12 warns about the intrinsics headers' own deliberately undefined
// vectors (_mm512_undefined_*); the warning is about them, not this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tern {

namespace {

// ---- scalar reference --------------------------------------------------------

// Masks of one group (and its residuals, with error feedback).  `draws` caches the 64 draws of the current 64-element
// super-group (index *cachedSuper).
void groupMasksScalar(const TernaryInput& in, size_t q, uint32_t* nz, uint32_t* neg,
                      uint32_t draws[64], uint64_t* cachedSuper) {
  uint64_t super = q / 2;
  if (*cachedSuper != super) {
    for (int b = 0; b < 16; ++b) {
      uint32_t r[4];
      ternaryBlockDraws(in.key, 16 * super + b, r);
      for (int j = 0; j < 4; ++j) draws[16 * j + b] = r[j];
    }
    *cachedSuper = super;
  }
  uint32_t z = 0, n = 0;
  for (int e = 0; e < 32; ++e) {
    size_t i = 32 * q + e;
    if (i >= in.count) break;
    float g = ternaryLoad(in.g, in.dt, i);
    const float s = in.scales[i / in.block];
    if (in.residual) g += in.residual[i];
    int t = ternaryCode(g, s, draws[i % 64]);
    if (in.residual) in.residual[i] = ternaryResidual(g, s, t);
    z |= static_cast<uint32_t>(t != 0) << e;
    n |= static_cast<uint32_t>(t < 0) << e;
  }
  *nz = z;
  *neg = n;
}

void encodeScalar(const TernaryInput& in, size_t g0, size_t n, uint32_t* out) {
  uint32_t draws[64];
  uint64_t cached = ~0ull;
  for (size_t k = 0; k < n; ++k) {
    uint32_t nz, neg;
    groupMasksScalar(in, g0 + k, &nz, &neg, draws, &cached);
    planesAddCode(nullptr, 0, nz, neg, out + 2 * k, 2);
  }
}

void addEncodeScalar(const TernaryInput& in, size_t g0, size_t n, const uint32_t* planes, int win,
                     uint32_t* out, int wout) {
  uint32_t draws[64];
  uint64_t cached = ~0ull;
  for (size_t k = 0; k < n; ++k) {
    uint32_t nz, neg;
    groupMasksScalar(in, g0 + k, &nz, &neg, draws, &cached);
    planesAddCode(planes + win * k, win, nz, neg, out + wout * k, wout);
  }
}

void storeElem(void* dst, ternDataType_t dt, size_t i, float v) {
  if (dt == ternFloat16) static_cast<uint16_t*>(dst)[i] = floatToHalf(v);
  else if (dt == ternBfloat16) static_cast<uint16_t*>(dst)[i] = floatToBf16(v);
  else static_cast<float*>(dst)[i] = v;
}

void decodeScalar(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                  uint32_t block, size_t count, ternDataType_t dt, int avgN, void* dst) {
  for (size_t k = 0; k < n; ++k) {
    const uint32_t* p = planes + w * k;
    for (int e = 0; e < 32; ++e) {
      size_t i = 32 * (g0 + k) + e;
      if (i >= count) return;
      storeElem(dst, dt, i, ternaryDecode(planesLane(p, w, e), scales[i / block], avgN));
    }
  }
}

// ---- SIMD helpers --------------------------------------------------------------

// Is super-group `super` (64 elements) entirely inside the buffer?
inline bool fullSuper(const TernaryInput& in, uint64_t super) { return 64 * (super + 1) <= in.count; }

// Runs `pair(super, nzLo, negLo, nzHi, negHi)` over whole super-groups and the
// scalar reference over the ragged ends; `one(q, nz, neg)` consumes a group.
template <class Super, class One>
void forGroups(const TernaryInput& in, size_t g0, size_t n, Super superMasks, One one) {
  uint32_t draws[64];
  uint64_t cached = ~0ull;
  size_t q = g0, end = g0 + n;
  while (q < end) {
    if (q % 2 == 0 && q + 1 < end && fullSuper(in, q / 2)) {
      uint32_t m[4];
      superMasks(in, q / 2, m);
      one(q, m[0], m[1]);
      one(q + 1, m[2], m[3]);
      q += 2;
    } else {
      uint32_t nz, neg;
      groupMasksScalar(in, q, &nz, &neg, draws, &cached);
      one(q, nz, neg);
      q += 1;
    }
  }
}

// ---- AVX-512 -------------------------------------------------------------------

#define TERN_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c")))

TERN_AVX512 inline void mulhilo16(__m512i x, __m512i m, __m512i* hi, __m512i* lo) {
  __m512i even = _mm512_mul_epu32(x, m);
  __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

TERN_AVX512 inline __m512 load16(const TernaryInput& in, size_t i) {
  if (in.dt == ternFloat32) return _mm512_loadu_ps(static_cast<const float*>(in.g) + i);
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(in.g) + i));
  if (in.dt == ternFloat16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// m = {nz, neg} of group 2*super, then of group 2*super + 1; with error
// feedback the 64 residuals are read with g and written back in this pass.
TERN_AVX512 void superMasks512(const TernaryInput& in, uint64_t super, uint32_t m[4]) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint64_t base = 16 * super;
  __m512i x0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<uint32_t>(base)), lane);
  __m512i carry = _mm512_maskz_set1_epi32(_mm512_cmplt_epu32_mask(x0, lane), 1);
  __m512i x1 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<uint32_t>(base >> 32)), carry);
  __m512i x2 = _mm512_set1_epi32(in.key.c2), x3 = _mm512_set1_epi32(in.key.c3);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t k0 = in.key.k0, k1 = in.key.k1;
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m512i hi0, lo0, hi1, lo1;
    mulhilo16(x0, m0, &hi0, &lo0);
    mulhilo16(x2, m1, &hi1, &lo1);
    __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, x1), _mm512_set1_epi32(static_cast<int>(k0)));
    __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, x3), _mm512_set1_epi32(static_cast<int>(k1)));
    x0 = n0;
    x1 = lo1;
    x2 = n2;
    x3 = lo0;
  }
  const __m512i words[4] = {x0, x1, x2, x3};
  const __m512 s = _mm512_set1_ps(in.scales[(64 * super) / in.block]);
  const __m512 toUnit = _mm512_set1_ps(1.0f / 16777216.0f);
  const __m512 zero = _mm512_setzero_ps();
  const __m512 one = _mm512_set1_ps(1.0f), minusOne = _mm512_set1_ps(-1.0f);
  uint32_t nz[4], neg[4];
  for (int j = 0; j < 4; ++j) {
    const size_t i = 64 * super + 16 * j;
    __m512 g = load16(in, i);
    if (in.residual) g = _mm512_add_ps(g, _mm512_loadu_ps(in.residual + i));
    __m512 a = _mm512_abs_ps(g);
    __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(words[j], 8)), toUnit);
    const __mmask16 z = _mm512_cmp_ps_mask(_mm512_mul_ps(u, s), a, _CMP_LT_OQ);
    const __mmask16 n = _mm512_cmp_ps_mask(g, zero, _CMP_LT_OQ);
    nz[j] = z;
    neg[j] = n;
    if (in.residual) {  // ternaryResidual: t as float is +-1 where coded, +0 elsewhere
      __m512 t = _mm512_maskz_mov_ps(z, _mm512_mask_blend_ps(n, one, minusOne));
      _mm512_storeu_ps(in.residual + i, _mm512_sub_ps(g, _mm512_mul_ps(t, s)));
    }
  }
  m[0] = nz[0] | nz[1] << 16;
  m[1] = neg[0] | neg[1] << 16;
  m[2] = nz[2] | nz[3] << 16;
  m[3] = neg[2] | neg[3] << 16;
}


TERN_AVX512 void decode512(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                           uint32_t block, size_t count, ternDataType_t dt, int avgN, void* dst) {
  if (dt != ternFloat32) return decodeScalar(planes, w, g0, n, scales, block, count, dt, avgN, dst);
  float* d = static_cast<float*>(dst);
  const __m512 divisor = _mm512_set1_ps(static_cast<float>(avgN));
  for (size_t k = 0; k < n; ++k) {
    size_t i0 = 32 * (g0 + k);
    if (i0 + 32 > count) {
      decodeScalar(planes + w * k, w, g0 + k, 1, scales, block, count, dt, avgN, dst);
      continue;
    }
    const uint32_t* p = planes + w * k;
    const __m512 s = _mm512_set1_ps(scales[i0 / block]);
    for (int h = 0; h < 2; ++h) {
      __m512i v = _mm512_setzero_si512();
      for (int j = 0; j < w - 1; ++j)
        v = _mm512_mask_add_epi32(v, static_cast<__mmask16>(p[j] >> (16 * h)), v,
                                  _mm512_set1_epi32(1 << j));
      v = _mm512_mask_sub_epi32(v, static_cast<__mmask16>(p[w - 1] >> (16 * h)), v,
                                _mm512_set1_epi32(1 << (w - 1)));
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
      if (avgN > 0) f = _mm512_div_ps(f, divisor);
      _mm512_storeu_ps(d + i0 + 16 * h, f);
    }
  }
}

// ---- AVX2 ----------------------------------------------------------------------

#define TERN_AVX2 __attribute__((target("avx2,f16c")))

TERN_AVX2 inline void mulhilo8(__m256i x, __m256i m, __m256i* hi, __m256i* lo) {
  __m256i even = _mm256_mul_epu32(x, m);
  __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

TERN_AVX2 inline __m256 load8(const TernaryInput& in, size_t i) {
  if (in.dt == ternFloat32) return _mm256_loadu_ps(static_cast<const float*>(in.g) + i);
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(in.g) + i));
  if (in.dt == ternFloat16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

TERN_AVX2 void superMasks256(const TernaryInput& in, uint64_t super, uint32_t m[4]) {
  uint32_t nz[8] = {}, neg[8] = {};  // per (word j, half h): 8 lanes each
  const __m256 s = _mm256_set1_ps(in.scales[(64 * super) / in.block]);
  const __m256 toUnit = _mm256_set1_ps(1.0f / 16777216.0f);
  const __m256 signMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 one = _mm256_set1_ps(1.0f), minusOne = _mm256_set1_ps(-1.0f);
  for (int h = 0; h < 2; ++h) {  // Philox blocks 16*super + 8h + lane
    uint64_t base = 16 * super + 8 * h;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i x0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<uint32_t>(base)), lane);
    // x0 < lane (unsigned) means the low half wrapped: carry into the high half.
    __m256i wrapped = _mm256_cmpgt_epi32(_mm256_xor_si256(lane, _mm256_set1_epi32(INT32_MIN)),
                                         _mm256_xor_si256(x0, _mm256_set1_epi32(INT32_MIN)));
    __m256i x1 = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<uint32_t>(base >> 32)), wrapped);
    __m256i x2 = _mm256_set1_epi32(in.key.c2), x3 = _mm256_set1_epi32(in.key.c3);
    const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
    const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
    uint32_t k0 = in.key.k0, k1 = in.key.k1;
    for (int r = 0; r < 10; ++r) {
      if (r) {
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
      }
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(x0, m0, &hi0, &lo0);
      mulhilo8(x2, m1, &hi1, &lo1);
      __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32(static_cast<int>(k0)));
      __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32(static_cast<int>(k1)));
      x0 = n0;
      x1 = lo1;
      x2 = n2;
      x3 = lo0;
    }
    const __m256i words[4] = {x0, x1, x2, x3};
    for (int j = 0; j < 4; ++j) {
      const size_t i = 64 * super + 16 * j + 8 * h;
      __m256 g = load8(in, i);
      if (in.residual) g = _mm256_add_ps(g, _mm256_loadu_ps(in.residual + i));
      __m256 a = _mm256_and_ps(g, signMask);
      __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(words[j], 8)), toUnit);
      const __m256 z = _mm256_cmp_ps(_mm256_mul_ps(u, s), a, _CMP_LT_OQ);
      const __m256 n = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
      nz[2 * j + h] = static_cast<uint32_t>(_mm256_movemask_ps(z));
      neg[2 * j + h] = static_cast<uint32_t>(_mm256_movemask_ps(n));
      if (in.residual) {  // ternaryResidual, as in superMasks512
        __m256 t = _mm256_and_ps(z, _mm256_blendv_ps(one, minusOne, n));
        _mm256_storeu_ps(in.residual + i, _mm256_sub_ps(g, _mm256_mul_ps(t, s)));
      }
    }
  }
  // Word j, half h covers elements 16j + 8h .. +7 of the super-group.
  auto gather = [](const uint32_t* x, int j0) {
    return x[2 * j0] | x[2 * j0 + 1] << 8 | x[2 * j0 + 2] << 16 | x[2 * j0 + 3] << 24;
  };
  m[0] = gather(nz, 0);
  m[1] = gather(neg, 0);
  m[2] = gather(nz, 2);
  m[3] = gather(neg, 2);
}

// float32 decode, 8 lanes at a time: each plane word's byte is broadcast,
// tested against per-lane bit masks and turned into +2^j (or -2^(w-1) for
// the sign plane).
TERN_AVX2 void decode256(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                         uint32_t block, size_t count, ternDataType_t dt, int avgN, void* dst) {
  if (dt != ternFloat32) return decodeScalar(planes, w, g0, n, scales, block, count, dt, avgN, dst);
  float* d = static_cast<float*>(dst);
  const __m256i laneBit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 divisor = _mm256_set1_ps(static_cast<float>(avgN));
  for (size_t k = 0; k < n; ++k) {
    size_t i0 = 32 * (g0 + k);
    if (i0 + 32 > count) {
      decodeScalar(planes + w * k, w, g0 + k, 1, scales, block, count, dt, avgN, dst);
      continue;
    }
    const uint32_t* p = planes + w * k;
    const __m256 s = _mm256_set1_ps(scales[i0 / block]);
    for (int h = 0; h < 4; ++h) {
      __m256i v = _mm256_setzero_si256();
      for (int j = 0; j < w; ++j) {
        __m256i bits = _mm256_set1_epi32(static_cast<int>((p[j] >> (8 * h)) & 0xffu));
        __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(bits, laneBit), laneBit);
        __m256i weight = _mm256_and_si256(set, _mm256_set1_epi32(1 << j));
        v = j < w - 1 ? _mm256_add_epi32(v, weight) : _mm256_sub_epi32(v, weight);
      }
      __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), s);
      if (avgN > 0) f = _mm256_div_ps(f, divisor);
      _mm256_storeu_ps(d + i0 + 8 * h, f);
    }
  }
}

// ---- Block statistics -----------------------------------------------------------
//
// 16 lanes of partial maxima / sums: over a float32 block's body, lane l takes
// elements lo + l, lo + l + 16, ...; the rest (a ragged tail; all of a
// float16 / bfloat16 block) goes to lane 0; the lanes are folded in order.  Every
// ISA and the CUDA kernel (memory/cuda_reduce.cu) keep exactly that order, so the
// sums of squares (not associative) come out bit for bit the same on every path,
// and the scalar loop vectorises without -ffast-math (one accumulator would be a
// serial chain).  Max is exact in any order, so without sums the SIMD paths take
// half-precision blocks in lanes too.  a > m ? a : m keeps m for a NaN, as
// MAXPS(a, m) does.
constexpr int kStatLanes = 16;

// Where a block's lane body ends (see above).
size_t laneBodyEnd(ternDataType_t dt, bool sums, size_t lo, size_t hi) {
  return dt == ternFloat32 || !sums ? hi : lo;
}

// The block's tail from element i and the fold of its lanes.
void finishBlock(const void* g, ternDataType_t dt, size_t i, size_t hi, float* m, float* sq,
                 float* maxOut, float* sqOut) {
  for (; i < hi; ++i) {
    float a = std::fabs(ternaryLoad(g, dt, i));
    m[0] = a > m[0] ? a : m[0];
    sq[0] += a * a;
  }
  float mm = 0, ss = 0;
  for (int l = 0; l < kStatLanes; ++l) {
    mm = m[l] > mm ? m[l] : mm;
    ss += sq[l];
  }
  *maxOut = mm;
  if (sqOut) *sqOut = ss;
}

void blockStatsScalar(const void* g, ternDataType_t dt, size_t count, uint32_t block, float* maxAbs,
                      float* sumSq) {
  for (size_t b = 0, nb = (count + block - 1) / block; b < nb; ++b) {
    size_t lo = b * block, hi = std::min(count, lo + block), i = lo;
    float m[kStatLanes] = {}, sq[kStatLanes] = {};
    const float* x = static_cast<const float*>(g);
    if (dt == ternFloat32)
      for (; i + kStatLanes <= hi; i += kStatLanes)
        for (int l = 0; l < kStatLanes; ++l) {
          float a = std::fabs(x[i + l]);
          m[l] = a > m[l] ? a : m[l];
          sq[l] += a * a;
        }
    finishBlock(g, dt, i, hi, m, sq, &maxAbs[b], sumSq ? &sumSq[b] : nullptr);
  }
}

// Lanes 0-7 and 8-15 in two registers.  Without sums of squares (the common
// case: no clipping) the pass is one max per load, bound by memory.
template <bool kSq>
TERN_AVX2 void blockStats256T(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                              float* maxAbs, float* sumSq) {
  const TernaryInput in{g, dt, count, nullptr, block, {}};
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (size_t b = 0, nb = (count + block - 1) / block; b < nb; ++b) {
    size_t lo = b * block, hi = std::min(count, lo + block), i = lo;
    __m256 m0 = _mm256_setzero_ps(), m1 = m0, s0 = m0, s1 = m0;
    for (const size_t end = laneBodyEnd(dt, kSq, lo, hi); i + kStatLanes <= end; i += kStatLanes) {
      __m256 a0 = _mm256_and_ps(load8(in, i), absMask), a1 = _mm256_and_ps(load8(in, i + 8), absMask);
      m0 = _mm256_max_ps(a0, m0);
      m1 = _mm256_max_ps(a1, m1);
      if (kSq) {
        s0 = _mm256_add_ps(s0, _mm256_mul_ps(a0, a0));
        s1 = _mm256_add_ps(s1, _mm256_mul_ps(a1, a1));
      }
    }
    float m[kStatLanes], sq[kStatLanes];
    _mm256_storeu_ps(m, m0);
    _mm256_storeu_ps(m + 8, m1);
    _mm256_storeu_ps(sq, s0);
    _mm256_storeu_ps(sq + 8, s1);
    finishBlock(g, dt, i, hi, m, sq, &maxAbs[b], kSq ? &sumSq[b] : nullptr);
  }
}

void blockStats256(const void* g, ternDataType_t dt, size_t count, uint32_t block, float* maxAbs,
                   float* sumSq) {
  if (sumSq) blockStats256T<true>(g, dt, count, block, maxAbs, sumSq);
  else blockStats256T<false>(g, dt, count, block, maxAbs, sumSq);
}

template <bool kSq>
TERN_AVX512 void blockStats512T(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                                float* maxAbs, float* sumSq) {
  const TernaryInput in{g, dt, count, nullptr, block, {}};
  for (size_t b = 0, nb = (count + block - 1) / block; b < nb; ++b) {
    size_t lo = b * block, hi = std::min(count, lo + block), i = lo;
    __m512 m0 = _mm512_setzero_ps(), s0 = m0;
    for (const size_t end = laneBodyEnd(dt, kSq, lo, hi); i + kStatLanes <= end; i += kStatLanes) {
      __m512 a = _mm512_abs_ps(load16(in, i));
      m0 = _mm512_max_ps(a, m0);
      // Explicit rounding: GCC writes _mm512_mul/add_ps as vector arithmetic and
      // would fuse them into an FMA (AVX-512F has one), which rounds once.
      constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      if (kSq) s0 = _mm512_add_round_ps(s0, _mm512_mul_round_ps(a, a, kRound), kRound);
    }
    float m[kStatLanes], sq[kStatLanes];
    _mm512_storeu_ps(m, m0);
    _mm512_storeu_ps(sq, s0);
    finishBlock(g, dt, i, hi, m, sq, &maxAbs[b], kSq ? &sumSq[b] : nullptr);
  }
}

void blockStats512(const void* g, ternDataType_t dt, size_t count, uint32_t block, float* maxAbs,
                   float* sumSq) {
  if (sumSq) blockStats512T<true>(g, dt, count, block, maxAbs, sumSq);
  else blockStats512T<false>(g, dt, count, block, maxAbs, sumSq);
}

// encode / addEncode for an ISA, given its super-group mask function.
template <void (*SuperMasks)(const TernaryInput&, uint64_t, uint32_t*)>
void addEncodeSimd(const TernaryInput& in, size_t g0, size_t n, const uint32_t* planes, int win,
                   uint32_t* out, int wout) {
  forGroups(in, g0, n, SuperMasks, [&](size_t q, uint32_t nz, uint32_t neg) {
    planesAddCode(planes ? planes + win * (q - g0) : nullptr, win, nz, neg, out + wout * (q - g0),
                  wout);
  });
}

template <void (*SuperMasks)(const TernaryInput&, uint64_t, uint32_t*)>
void encodeSimd(const TernaryInput& in, size_t g0, size_t n, uint32_t* out) {
  addEncodeSimd<SuperMasks>(in, g0, n, nullptr, 0, out, 2);
}

const TernaryKernels kScalar{"scalar", encodeScalar, addEncodeScalar, decodeScalar, blockStatsScalar};
const TernaryKernels kAvx2{"avx2", encodeSimd<superMasks256>, addEncodeSimd<superMasks256>,
                           decode256, blockStats256};
const TernaryKernels kAvx512{"avx512", encodeSimd<superMasks512>, addEncodeSimd<superMasks512>,
                             decode512, blockStats512};

bool cpuHas(const char* isa) {
  __builtin_cpu_init();
  if (!strcmp(isa, "avx512"))
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (!strcmp(isa, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return !strcmp(isa, "scalar");
}

}  // namespace

const TernaryKernels* ternaryKernelsFor(const char* isa) {
  if (!cpuHas(isa)) return nullptr;
  if (!strcmp(isa, "avx512")) return &kAvx512;
  if (!strcmp(isa, "avx2")) return &kAvx2;
  return &kScalar;
}

const TernaryKernels& ternaryKernels() {
  static const TernaryKernels* best = [] {
    std::string forced = envString("TERN_TERNARY_ISA", "");
    if (!forced.empty() && ternaryKernelsFor(forced.c_str())) return ternaryKernelsFor(forced.c_str());
    for (const char* isa : {"avx512", "avx2"})
      if (const TernaryKernels* k = ternaryKernelsFor(isa)) return k;
    return &kScalar;
  }();
  return *best;
}

void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                       float* maxAbs, float* sumSq) {
  ternaryKernels().blockStats(g, dt, count, block, maxAbs, sumSq);
}

}  // namespace tern
