#include "collectives/reduce_kernels.h"

#include <cstdint>
#include <cstring>

namespace tern {

float halfToFloat(unsigned short h) {
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
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

unsigned short floatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
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

float bf16ToFloat(unsigned short h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

unsigned short floatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<unsigned short>(x >> 16);
}

namespace {

struct Sum  { template <class T> static T apply(T a, T b) { return a + b; } };
struct Prod { template <class T> static T apply(T a, T b) { return a * b; } };
struct Max  { template <class T> static T apply(T a, T b) { return a > b ? a : b; } };
struct Min  { template <class T> static T apply(T a, T b) { return a < b ? a : b; } };

// Native types: plain loops the compiler vectorises.
template <class T, class Op>
void loop(T* d, const T* a, const T* b, size_t n, int div) {
  if (div > 0) {
    const T dv = static_cast<T>(div);
    for (size_t i = 0; i < n; ++i) d[i] = Op::apply(a[i], b[i]) / dv;
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = Op::apply(a[i], b[i]);
  }
}

// 16-bit floats: widen, reduce in float, narrow.
template <class Op, float (*Load)(unsigned short), unsigned short (*Store)(float)>
void loop16(unsigned short* d, const unsigned short* a, const unsigned short* b, size_t n,
            int div) {
  const float dv = static_cast<float>(div);
  for (size_t i = 0; i < n; ++i) {
    float r = Op::apply(Load(a[i]), Load(b[i]));
    d[i] = Store(div > 0 ? r / dv : r);
  }
}

template <class Op>
void dispatchType(void* d, const void* a, const void* b, size_t n, ternDataType_t dt, int div) {
#define TERN_LOOP(T) loop<T, Op>(static_cast<T*>(d), static_cast<const T*>(a), \
                                 static_cast<const T*>(b), n, div)
  using U16 = unsigned short;
  switch (dt) {
    case ternInt8: TERN_LOOP(int8_t); break;
    case ternUint8: TERN_LOOP(uint8_t); break;
    case ternInt32: TERN_LOOP(int32_t); break;
    case ternUint32: TERN_LOOP(uint32_t); break;
    case ternInt64: TERN_LOOP(int64_t); break;
    case ternUint64: TERN_LOOP(uint64_t); break;
    case ternFloat32: TERN_LOOP(float); break;
    case ternFloat64: TERN_LOOP(double); break;
    case ternFloat16:
      loop16<Op, halfToFloat, floatToHalf>(static_cast<U16*>(d), static_cast<const U16*>(a),
                                           static_cast<const U16*>(b), n, div);
      break;
    case ternBfloat16:
      loop16<Op, bf16ToFloat, floatToBf16>(static_cast<U16*>(d), static_cast<const U16*>(a),
                                           static_cast<const U16*>(b), n, div);
      break;
    default: break;
  }
#undef TERN_LOOP
}

}  // namespace

void reduceKernel(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
                  ternRedOp_t op, int avgDivisor) {
  switch (op) {
    case ternSum: dispatchType<Sum>(dst, a, b, count, dt, 0); break;
    case ternAvg: dispatchType<Sum>(dst, a, b, count, dt, avgDivisor); break;
    case ternProd: dispatchType<Prod>(dst, a, b, count, dt, 0); break;
    case ternMax: dispatchType<Max>(dst, a, b, count, dt, 0); break;
    case ternMin: dispatchType<Min>(dst, a, b, count, dt, 0); break;
    default: break;
  }
}

namespace {
struct First { template <class T> static T apply(T a, T) { return a; } };
}  // namespace

void divideKernel(void* buf, size_t count, ternDataType_t dt, int divisor) {
  dispatchType<First>(buf, buf, buf, count, dt, divisor);
}

}  // namespace tern
