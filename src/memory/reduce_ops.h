// The element operations of every reduction, shared by the host loops
// (host_reduce.cc) and the CUDA kernels (cuda_reduce.cu) so both compute the
// same bits: one definition, compiled by g++ and by nvcc (TERN_HD).
#pragma once
#include <type_traits>

#include "codec/half.h"  // TERN_HD

namespace tern {

// Signed integers wrap on overflow (as in NCCL) instead of being undefined:
// the arithmetic happens in the unsigned type of the same width.
template <class T>
using Wrap = typename std::conditional<std::is_integral<T>::value,
                                       std::make_unsigned<T>, std::common_type<T>>::type::type;
struct Sum  { template <class T> TERN_HD static T apply(T a, T b) { return T(Wrap<T>(a) + Wrap<T>(b)); } };
struct Prod { template <class T> TERN_HD static T apply(T a, T b) { return T(Wrap<T>(a) * Wrap<T>(b)); } };
struct Max  { template <class T> TERN_HD static T apply(T a, T b) { return a > b ? a : b; } };
struct Min  { template <class T> TERN_HD static T apply(T a, T b) { return a < b ? a : b; } };
// divide(): the "reduction" that keeps its first operand, then divides.
struct First { template <class T> TERN_HD static T apply(T a, T) { return a; } };

// One element: a (op) b, divided by div when div > 0 (ternAvg; integer
// averages truncate like C division).
template <class Op, class T>
TERN_HD inline T reduceElem(T a, T b, int div) {
  return div > 0 ? T(Op::apply(a, b) / static_cast<T>(div)) : Op::apply(a, b);
}

// 16-bit floats: widen, reduce in float, narrow (round to nearest even).
template <class Op, float (*Load)(unsigned short), unsigned short (*Store)(float)>
TERN_HD inline unsigned short reduceElem16(unsigned short a, unsigned short b, int div) {
  float r = Op::apply(Load(a), Load(b));
  return Store(div > 0 ? r / static_cast<float>(div) : r);
}

}  // namespace tern
