// The host reduction loops, without a namespace or an include guard:
// host_reduce.cc includes this file once per instruction set it builds them
// for (each inside its own namespace and `#pragma GCC target`), and picks
// one at run time.  The loops are plain C++ that the compiler vectorises,
// element by element, so every variant computes the same bits.
//
// Needs <cstdint>, tern/tern.h, codec/half.h and memory/reduce_ops.h
// included first (host_reduce.cc), outside any target pragma: their inline
// functions are then the default target's, which the compiler may inline
// into a wider one.  And, in the including namespace,
// `template <class Op, bool Bcast> size_t halfVector(d, a, b, n, div)`:
// how many leading IEEE-half elements it reduced (0: none).

// Native types: plain loops the compiler vectorises.  Bcast: b is one
// element, applied to every a[i] (PreMulSum's scaling).
template <class T, class Op, bool Bcast>
void loop(T* d, const T* a, const T* b, size_t n, int div) {
  if (div > 0) {
    const T dv = static_cast<T>(div);
    for (size_t i = 0; i < n; ++i) d[i] = Op::apply(a[i], b[Bcast ? 0 : i]) / dv;
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = Op::apply(a[i], b[Bcast ? 0 : i]);
  }
}

// 16-bit floats: widen, reduce in float, narrow.  IEEE halves go eight at
// a time through the includer's halfVector (host_reduce.cc: F16C's
// conversions, where the variant has them) and the rest one by one.
template <class Op, bool Bcast, float (*Load)(unsigned short), unsigned short (*Store)(float)>
void loop16(unsigned short* d, const unsigned short* a, const unsigned short* b, size_t n, int div) {
  size_t i = Load == halfToFloat ? halfVector<Op, Bcast>(d, a, b, n, div) : 0;
  for (; i < n; ++i) d[i] = reduceElem16<Op, Load, Store>(a[i], b[Bcast ? 0 : i], div);
}

template <class Op, bool Bcast = false>
inline void dispatchType(void* d, const void* a, const void* b, size_t n, ternDataType_t dt, int div) {
#define TERN_LOOP(T) \
  loop<T, Op, Bcast>(static_cast<T*>(d), static_cast<const T*>(a), static_cast<const T*>(b), n, div)
  using U16 = unsigned short;
  switch (dt) {
    case ternInt8:
      TERN_LOOP(int8_t);
      break;
    case ternUint8:
      TERN_LOOP(uint8_t);
      break;
    case ternInt32:
      TERN_LOOP(int32_t);
      break;
    case ternUint32:
      TERN_LOOP(uint32_t);
      break;
    case ternInt64:
      TERN_LOOP(int64_t);
      break;
    case ternUint64:
      TERN_LOOP(uint64_t);
      break;
    case ternFloat32:
      TERN_LOOP(float);
      break;
    case ternFloat64:
      TERN_LOOP(double);
      break;
    case ternFloat16:
      loop16<Op, Bcast, halfToFloat, floatToHalf>(static_cast<U16*>(d), static_cast<const U16*>(a),
                                                  static_cast<const U16*>(b), n, div);
      break;
    case ternBfloat16:
      loop16<Op, Bcast, bf16ToFloat, floatToBf16>(static_cast<U16*>(d), static_cast<const U16*>(a),
                                                  static_cast<const U16*>(b), n, div);
      break;
    default:
      break;
  }
#undef TERN_LOOP
}

// The three entry points of one instruction set (host_reduce.h).
inline void reduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt, ternRedOp_t op,
                   int avgDivisor) {
  switch (op) {
    case ternSum:
      dispatchType<Sum>(dst, a, b, count, dt, 0);
      break;
    case ternAvg:
      dispatchType<Sum>(dst, a, b, count, dt, avgDivisor);
      break;
    case ternProd:
      dispatchType<Prod>(dst, a, b, count, dt, 0);
      break;
    case ternMax:
      dispatchType<Max>(dst, a, b, count, dt, 0);
      break;
    case ternMin:
      dispatchType<Min>(dst, a, b, count, dt, 0);
      break;
    default:
      break;
  }
}
inline void divide(void* buf, size_t count, ternDataType_t dt, int divisor) {
  dispatchType<First>(buf, buf, buf, count, dt, divisor);
}
inline void scale(void* dst, const void* src, size_t count, ternDataType_t dt, const void* scalar) {
  dispatchType<Prod, true>(dst, src, scalar, count, dt, 0);
}
