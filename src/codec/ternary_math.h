// Ternary codec element math, shared bit for bit by the CPU kernels (scalar
// and SIMD), the CUDA kernels and the tests' independent checks.  Nothing
// here knows about peers or buffers beyond one 32-element group.
//
// Randomness.  Philox4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11), key = (lo32(seed) ^ hi32(seed), rank), counter =
// (block, 0, lo32(call), hi32(call)).  Element i of a call uses
//     block = 16 * (i / 64) + i % 16,   word = (i % 64) / 16
// so one vector of 16 Philox blocks yields 64 consecutive elements' draws
// with no transpose (the SIMD kernels rely on this; the GPU gives each
// thread one block and 4 elements 16 apart).
//
// Codes.  t = sign(g) * [u * s < |g|] with u = (r >> 8) * 2^-24 in [0, 1):
// P(t != 0) = |g| / s, so E[s t] = g.  |g| = s gives t = sign(g) always;
// s = 0 gives t = 0; NaN gives 0; |g| > s (clipped) gives sign(g).
//
// Error feedback.  With a residual e, the value coded is v = g + e (float32)
// and the residual left is v - s * t (ternaryResidual), computed in the same
// pass as the code.  s * t is exact (t is -1, 0 or +1), so a compiler that
// contracts the two operations into one FMA gets the same bits.
//
// Bit planes.  A group of 32 values of width w is w uint32 words; word j
// holds bit j of every lane (two's complement).  Adding a ternary code
// (nz, neg masks) is a bit-sliced ripple-carry add; widening is sign
// extension.  After k ranks a value lies in [-k, k] and needs
// w(k) = floor(log2 k) + 2 bits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "codec/half.h"

namespace tern {

constexpr int kTernaryGroup = 32;   // lanes per bit-plane word
constexpr int kTernaryMaxWidth = 10;  // w(511); more ranks fall back to dense

TERN_HD inline int ternaryWidth(int k) {
  int w = 2;
  while (k >>= 1) ++w;
  return w;
}

TERN_HD inline void mulhilo32(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Philox4x32 with 10 rounds, in place on ctr.
TERN_HD inline void philox4x32_10(uint32_t ctr[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(0xD2511F53u, ctr[0], &hi0, &lo0);
    mulhilo32(0xCD9E8D57u, ctr[2], &hi1, &lo1);
    uint32_t c1 = ctr[1], c3 = ctr[3];
    ctr[0] = hi1 ^ c1 ^ k0;
    ctr[1] = lo1;
    ctr[2] = hi0 ^ c3 ^ k1;
    ctr[3] = lo0;
  }
}

struct TernaryKey {
  uint32_t k0, k1;    // Philox key
  uint32_t c2, c3;    // call index, the counter's high half
};

TERN_HD inline TernaryKey ternaryKey(uint64_t seed, uint32_t rank, uint64_t call) {
  return {static_cast<uint32_t>(seed) ^ static_cast<uint32_t>(seed >> 32), rank,
          static_cast<uint32_t>(call), static_cast<uint32_t>(call >> 32)};
}

TERN_HD inline uint64_t ternaryBlockOf(uint64_t i) { return 16 * (i / 64) + i % 16; }
TERN_HD inline int ternaryWordOf(uint64_t i) { return static_cast<int>((i % 64) / 16); }

// All four draws of one Philox block.
TERN_HD inline void ternaryBlockDraws(const TernaryKey& k, uint64_t block, uint32_t out[4]) {
  out[0] = static_cast<uint32_t>(block);
  out[1] = static_cast<uint32_t>(block >> 32);
  out[2] = k.c2;
  out[3] = k.c3;
  philox4x32_10(out, k.k0, k.k1);
}

TERN_HD inline uint32_t ternaryDraw(const TernaryKey& k, uint64_t i) {
  uint32_t r[4];
  ternaryBlockDraws(k, ternaryBlockOf(i), r);
  return r[ternaryWordOf(i)];
}

// -1, 0 or +1 for value g against scale s with draw r.
TERN_HD inline int ternaryCode(float g, float s, uint32_t r) {
  float u = static_cast<float>(r >> 8) * (1.0f / 16777216.0f);
  float a = g < 0 ? -g : g;
  if (!(u * s < a)) return 0;
  return g < 0 ? -1 : 1;
}

// The residual error feedback keeps for value v coded as t against scale s.
TERN_HD inline float ternaryResidual(float v, float s, int t) {
  return v - static_cast<float>(t) * s;
}

// out (wout planes) = a (win planes, sign-extended) + code (nz, neg masks).
// wout >= win; the caller guarantees the sum fits in wout bits.
TERN_HD inline void planesAddCode(const uint32_t* a, int win, uint32_t nz, uint32_t neg,
                                  uint32_t* out, int wout) {
  uint32_t carry = 0;
  neg &= nz;
  for (int j = 0; j < wout; ++j) {
    uint32_t x = a ? a[j < win ? j : win - 1] : 0;  // no a: the code alone
    uint32_t y = j == 0 ? nz : neg;                 // code sign-extended
    uint32_t s = x ^ y ^ carry;
    carry = (x & y) | (carry & (x ^ y));
    out[j] = s;
  }
}

// The signed value of one lane.
TERN_HD inline int planesLane(const uint32_t* p, int w, int lane) {
  int v = 0;
  for (int j = 0; j < w - 1; ++j) v |= static_cast<int>((p[j] >> lane) & 1u) << j;
  if ((p[w - 1] >> lane) & 1u) v -= 1 << (w - 1);
  return v;
}

// Decoded element: s * sum, or s * sum / n for an average.
TERN_HD inline float ternaryDecode(int sum, float s, int avgN) {
  float v = static_cast<float>(sum) * s;
  return avgN > 0 ? v / static_cast<float>(avgN) : v;
}

}  // namespace tern
