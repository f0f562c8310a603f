// IEEE halves eight at a time with F16C's conversions: the halfVector that
// host_reduce_loops.h asks of its includer, for the variants whose target
// has F16C (host_reduce.cc includes this file inside each such namespace,
// under its `#pragma GCC target`; no include guard for that reason).
//
// It gives the scalar loop's bits.  A half widens to float exactly either
// way; the float result narrows with round to nearest even either way (the
// immediate, not MXCSR, picks the rounding here; the scalar code rounds in
// integers); and max / min pick the operand the scalar `a > b ? a : b` picks
// (MAXPS returns its second operand when either is NaN or both are zero).
// Only NaN results differ: F16C keeps a payload where floatToHalf writes
// sign | 0x7e00, so a group of eight with a NaN result is redone one by one.

inline __m256 applyVec(Sum, __m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m256 applyVec(Prod, __m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
inline __m256 applyVec(Max, __m256 a, __m256 b) { return _mm256_max_ps(a, b); }
inline __m256 applyVec(Min, __m256 a, __m256 b) { return _mm256_min_ps(a, b); }
inline __m256 applyVec(First, __m256 a, __m256) { return a; }

inline __m256 widen8(const unsigned short* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <class Op, bool Bcast>
size_t halfVector(unsigned short* d, const unsigned short* a, const unsigned short* b, size_t n, int div) {
  const __m256 dv = _mm256_set1_ps(static_cast<float>(div > 0 ? div : 1));
  const __m256 one = Bcast ? _mm256_set1_ps(halfToFloat(b[0])) : _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r = applyVec(Op{}, widen8(a + i), Bcast ? one : widen8(b + i));
    if (div > 0) r = _mm256_div_ps(r, dv);
    const __m256 nan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
    if (__builtin_expect(!_mm256_testz_ps(nan, nan), 0)) {
      for (size_t j = i; j < i + 8; ++j)
        d[j] = reduceElem16<Op, halfToFloat, floatToHalf>(a[j], b[Bcast ? 0 : j], div);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
