// IEEE half and bfloat16 <-> float conversions, round to nearest even.
// Header-only and free of library state so the CPU reductions, the ternary
// codec (CPU and CUDA) and the perf/test verifiers all share one definition.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TERN_HD __host__ __device__
#else
#define TERN_HD
#endif

namespace tern {

TERN_HD inline float bitsToFloat(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  memcpy(&f, &b, 4);
  return f;
#endif
}

TERN_HD inline uint32_t floatToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
#endif
}

TERN_HD inline float halfToFloat(unsigned short h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do { ++e; man <<= 1; } while (!(man & 0x400u));
    bits = sign | ((112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  return bitsToFloat(bits);
}

TERN_HD inline unsigned short floatToHalf(float f) {
  uint32_t x = floatToBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf or nan (keep nan quiet)
    return static_cast<unsigned short>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // overflow
  if (absx < 0x38800000u) {  // result is subnormal or zero: round at the right bit
    if (absx < 0x33000000u) return static_cast<unsigned short>(sign);
    uint32_t man = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);
    uint32_t half = 1u << (shift - 1), rest = man & ((1u << shift) - 1);
    uint32_t r = man >> shift;
    if (rest > half || (rest == half && (r & 1))) ++r;
    return static_cast<unsigned short>(sign | r);
  }
  uint32_t r = absx + 0xc8000fffu + ((absx >> 13) & 1);  // rebias and round to nearest even
  return static_cast<unsigned short>(sign | (r >> 13));
}

TERN_HD inline float bf16ToFloat(unsigned short h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  return bitsToFloat(bits);
}

TERN_HD inline unsigned short floatToBf16(float f) {
  uint32_t x = floatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<unsigned short>(x >> 16);
}

}  // namespace tern
