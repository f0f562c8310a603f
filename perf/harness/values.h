// Exactly verifiable test data, shared by the perf binaries and the tests.
// Inputs are small integers, so every sum, product, max and min is exact in
// every datatype (float16 and bfloat16 included) whatever the reduction
// order; ternAvg is checked against the same division the library performs.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "codec/half.h"
#include "tern/tern.h"

namespace ternperf {

inline bool isSigned(ternDataType_t dt) {
  return dt == ternInt8 || dt == ternInt32 || dt == ternInt64 || dt == ternFloat16 ||
         dt == ternFloat32 || dt == ternFloat64 || dt == ternBfloat16;
}
inline bool isFloat(ternDataType_t dt) {
  return dt == ternFloat16 || dt == ternFloat32 || dt == ternFloat64 || dt == ternBfloat16;
}

// Input element i of `rank` for reductions with `op`.
inline double inputValue(int rank, size_t i, ternDataType_t dt, ternRedOp_t op, uint64_t seed = 0) {
  uint64_t h = (i + seed) * 7 + static_cast<uint64_t>(rank) * 13;
  if (op == ternProd) return ((i + seed + static_cast<uint64_t>(rank)) % 8 == 0) ? 2.0 : 1.0;
  double v = static_cast<double>(h % 11);
  return isSigned(dt) ? v - 5.0 : v;
}

inline void store(ternDataType_t dt, void* buf, size_t i, double v) {
  switch (dt) {
    case ternInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case ternUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case ternInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case ternUint32: static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v); break;
    case ternInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case ternUint64: static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(v); break;
    case ternFloat16: static_cast<uint16_t*>(buf)[i] = tern::floatToHalf(static_cast<float>(v)); break;
    case ternBfloat16: static_cast<uint16_t*>(buf)[i] = tern::floatToBf16(static_cast<float>(v)); break;
    case ternFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case ternFloat64: static_cast<double*>(buf)[i] = v; break;
    default: break;
  }
}

inline double load(ternDataType_t dt, const void* buf, size_t i) {
  switch (dt) {
    case ternInt8: return static_cast<const int8_t*>(buf)[i];
    case ternUint8: return static_cast<const uint8_t*>(buf)[i];
    case ternInt32: return static_cast<const int32_t*>(buf)[i];
    case ternUint32: return static_cast<const uint32_t*>(buf)[i];
    case ternInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case ternUint64: return static_cast<double>(static_cast<const uint64_t*>(buf)[i]);
    case ternFloat16: return tern::halfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case ternBfloat16: return tern::bf16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case ternFloat32: return static_cast<const float*>(buf)[i];
    case ternFloat64: return static_cast<const double*>(buf)[i];
    default: return NAN;
  }
}

// The value the library must produce for element i reduced over ranks
// [0, nranks) (contributions given by `value(rank)`), as stored in dt.
template <class F>
double expectedReduction(ternDataType_t dt, ternRedOp_t op, int nranks, F value) {
  double acc = value(0);
  for (int r = 1; r < nranks; ++r) {
    double v = value(r);
    switch (op) {
      case ternProd: acc *= v; break;
      case ternMax: acc = v > acc ? v : acc; break;
      case ternMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  if (op == ternAvg) {
    if (dt == ternFloat64) acc = acc / nranks;
    else if (isFloat(dt)) acc = static_cast<float>(acc) / static_cast<float>(nranks);
    else acc = std::trunc(acc / nranks);
  }
  char tmp[8];
  store(dt, tmp, 0, acc);  // round as the datatype does
  return load(dt, tmp, 0);
}

// inputValue depends on i only through (i + seed) % kValuePeriod: the hash
// (h % 11, with 7 prime to 11) repeats every 11 elements and the product's
// pattern every 8.  A checker therefore computes one period of inputs or of
// expected results per call instead of one per element.
constexpr size_t kValuePeriod = 88;

struct ValueTable {
  double v[kValuePeriod];
  double at(size_t i) const { return v[i % kValuePeriod]; }
};

// `rank`'s inputs (as stored in dt when `asStored`, for comparing a copy).
inline ValueTable inputTable(int rank, ternDataType_t dt, ternRedOp_t op, uint64_t seed = 0,
                             bool asStored = false) {
  ValueTable t;
  char tmp[8];
  for (size_t j = 0; j < kValuePeriod; ++j) {
    t.v[j] = inputValue(rank, j, dt, op, seed);
    if (asStored) store(dt, tmp, 0, t.v[j]), t.v[j] = load(dt, tmp, 0);
  }
  return t;
}

// The expected reduction over ranks [0, nranks) of those inputs.
inline ValueTable reductionTable(int nranks, ternDataType_t dt, ternRedOp_t op, uint64_t seed = 0) {
  ValueTable t;
  for (size_t j = 0; j < kValuePeriod; ++j)
    t.v[j] = expectedReduction(dt, op, nranks, [&](int r) { return inputValue(r, j, dt, op, seed); });
  return t;
}

inline const char* typeName(ternDataType_t dt) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64",
                                "uint64", "half", "float", "double", "bfloat16"};
  return (dt >= 0 && dt < ternNumTypes) ? names[dt] : "?";
}
inline const char* opName(ternRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return (op >= 0 && op < ternNumOps) ? names[op] : "?";
}

}  // namespace ternperf
