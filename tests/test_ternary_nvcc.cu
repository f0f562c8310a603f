// Compiled by nvcc: the element math exactly as the CUDA kernels compile it
// (TERN_HD = __host__ __device__), run on the host, against the CPU kernels'
// output.  Needs no GPU; proves CPU SIMD == scalar == CUDA element math.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "codec/ternary_cpu.h"
#include "codec/ternary_math.h"

namespace tern {
namespace {

TEST(NvccElementMath, MatchesEveryCpuKernel) {
  const size_t count = 5000;
  const uint32_t block = 64;
  std::vector<float> g(count), s((count + block - 1) / block);
  for (size_t i = 0; i < count; ++i)
    g[i] = static_cast<float>(static_cast<int>((i * 40503u) % 1999) - 999) / 313.f;
  ternaryBlockStats(g.data(), ternFloat32, count, block, s.data(), nullptr);
  TernaryKey key = ternaryKey(2024, 7, 77);
  TernaryInput in{g.data(), ternFloat32, count, s.data(), block, key};
  size_t groups = (count + 31) / 32;
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    const TernaryKernels* k = ternaryKernelsFor(isa);
    if (!k) continue;
    std::vector<uint32_t> planes(2 * groups);
    k->encode(in, 0, groups, planes.data());
    for (size_t i = 0; i < count; ++i) {
      int t = ternaryCode(g[i], s[i / block], ternaryDraw(key, i));  // nvcc-compiled math
      ASSERT_EQ(planesLane(&planes[2 * (i / 32)], 2, i % 32), t) << isa << " element " << i;
    }
  }
}

// Error feedback: every CPU kernel's fused pass against the per-element
// definition as nvcc compiles it (v = g + e, t, e' = ternaryResidual).
TEST(NvccElementMath, ErrorFeedbackMatchesEveryCpuKernel) {
  const size_t count = 5000;
  const uint32_t block = 64;
  std::vector<float> g(count), s((count + block - 1) / block), e0(count);
  for (size_t i = 0; i < count; ++i) {
    g[i] = static_cast<float>(static_cast<int>((i * 40503u) % 1999) - 999) / 313.f;
    e0[i] = static_cast<float>(static_cast<int>(i % 41) - 20) / 7.f;
  }
  ternaryBlockStats(g.data(), ternFloat32, count, block, s.data(), nullptr);
  TernaryKey key = ternaryKey(2024, 7, 78);
  size_t groups = (count + 31) / 32;
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    const TernaryKernels* k = ternaryKernelsFor(isa);
    if (!k) continue;
    std::vector<float> e = e0;
    TernaryInput in{g.data(), ternFloat32, count, s.data(), block, key};
    in.residual = e.data();
    std::vector<uint32_t> planes(2 * groups);
    k->encode(in, 0, groups, planes.data());
    for (size_t i = 0; i < count; ++i) {
      const float v = g[i] + e0[i], sc = s[i / block];
      const int t = ternaryCode(v, sc, ternaryDraw(key, i));
      ASSERT_EQ(planesLane(&planes[2 * (i / 32)], 2, i % 32), t) << isa << " element " << i;
      const float want = ternaryResidual(v, sc, t);
      ASSERT_EQ(memcmp(&e[i], &want, 4), 0) << isa << " residual " << i;
    }
  }
}

}  // namespace
}  // namespace tern
