// CPU ternary codec kernels: a scalar reference and AVX2 / AVX-512 paths,
// picked at run time (TERN_TERNARY_ISA=scalar|avx2|avx512 forces one).  All
// produce the same bits (tests/test_ternary_codec.cc).  Groups are 32
// consecutive elements; group q covers elements [32q, 32q + 32) of the call.
#pragma once
#include <cstddef>
#include <cstdint>

#include "codec/ternary_math.h"
#include "tern/tern.h"

namespace tern {

struct TernaryInput {
  const void* g;          // the caller's gradient
  ternDataType_t dt;      // float32, float16 or bfloat16
  size_t count;           // elements; lanes past it are zero
  const float* scales;    // one per block, identical on every rank
  uint32_t block;         // elements per scale block, a multiple of 64
  TernaryKey key;         // seed, rank, call
  // Error feedback (nullptr: off): count floats in g's memory.  An encode
  // then codes g + residual and, in the same pass, leaves the new residual
  // (ternary_math.h) for exactly the groups it encodes.
  float* residual = nullptr;
};

struct TernaryKernels {
  const char* isa;
  // out[2 * n]: the codes of groups [g0, g0 + n) as width-2 planes (and
  // their residuals updated when in.residual is set: each group once a call).
  void (*encode)(const TernaryInput& in, size_t g0, size_t n, uint32_t* out);
  // out[wout * n] = in[win * n] + codes, group by group.
  void (*addEncode)(const TernaryInput& in, size_t g0, size_t n, const uint32_t* planes, int win,
                    uint32_t* out, int wout);
  // Decodes n groups of width w (scale * sum, / avgN when > 0) into dst
  // (element 32 * g0 onwards, in dt); lanes past count are not written.
  void (*decode)(const uint32_t* planes, int w, size_t g0, size_t n, const float* scales,
                 uint32_t block, size_t count, ternDataType_t dt, int avgN, void* dst);
  // ternaryBlockStats below (the same bits on every ISA).
  void (*blockStats)(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                     float* maxAbs, float* sumSq);
};

const TernaryKernels& ternaryKernels();                  // the best this CPU runs
const TernaryKernels* ternaryKernelsFor(const char* isa);  // nullptr if unsupported here

// Per block: max |g| into maxAbs[b]; sum of g^2 into sumSq[b] when not null.
// The best kernel this CPU runs (the first pass of every ternary allreduce).
void ternaryBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block,
                       float* maxAbs, float* sumSq);

// One element as float (float32, float16, bfloat16 input).
inline float ternaryLoad(const void* g, ternDataType_t dt, size_t i) {
  if (dt == ternFloat16) return halfToFloat(static_cast<const uint16_t*>(g)[i]);
  if (dt == ternBfloat16) return bf16ToFloat(static_cast<const uint16_t*>(g)[i]);
  return static_cast<const float*>(g)[i];
}

}  // namespace tern
