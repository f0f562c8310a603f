// The ternary codec: Philox known answers, the element mapping, bit-plane
// arithmetic, every SIMD path bit-identical to the scalar reference (the same
// header the CUDA kernels compile), and the statistics of the codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codec/fifo_quantum.h"
#include "codec/ternary_cpu.h"
#include "codec/ternary_math.h"

namespace tern {
namespace {

TEST(Philox, KnownAnswers) {
  // Random123's kat_vectors for philox4x32 with 10 rounds.
  struct Kat { uint32_t ctr[4], key[2], out[4]; } kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (auto& k : kats) {
    uint32_t c[4] = {k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]};
    philox4x32_10(c, k.key[0], k.key[1]);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(c[j], k.out[j]) << j;
  }
}

// Every code width a job of n ranks uses (4*w bytes per 32-element group)
// and the page size divide the fifo quantum, so nothing straddles a wrap.
TEST(TernaryMath, FifoQuantumFitsEveryWidthOfTheJob) {
  for (int n : {1, 2, 3, 4, 7, 8, 64, 511, 1000}) {
    size_t q = ternaryFifoQuantum(n);
    EXPECT_EQ(q % 4096, 0u) << n;
    for (int w = 2; w <= std::min(ternaryWidth(n), kTernaryMaxWidth); ++w)
      EXPECT_EQ(q % (4 * w), 0u) << n << " ranks, width " << w;
    EXPECT_LE(q, size_t(4096) * 9 * 5 * 7) << n;  // lcm of the widths only, no more
  }
}

TEST(TernaryMath, WidthsAndPlaneArithmetic) {
  EXPECT_EQ(ternaryWidth(1), 2);
  EXPECT_EQ(ternaryWidth(2), 3);
  EXPECT_EQ(ternaryWidth(3), 3);
  EXPECT_EQ(ternaryWidth(4), 4);
  EXPECT_EQ(ternaryWidth(7), 4);
  EXPECT_EQ(ternaryWidth(8), 5);
  // Every value of width w(k) plus every code, checked against integers.
  for (int k = 1; k <= 40; ++k) {
    int win = ternaryWidth(k), wout = ternaryWidth(k + 1);
    for (int v = -k; v <= k; ++v)
      for (int t = -1; t <= 1; ++t) {
        uint32_t a[16] = {}, out[16] = {};
        for (int j = 0; j < win; ++j) a[j] = ((static_cast<unsigned>(v) >> j) & 1u) ? 1u << 7 : 0;
        planesAddCode(a, win, t != 0 ? 1u << 7 : 0, t < 0 ? 1u << 7 : 0, out, wout);
        ASSERT_EQ(planesLane(out, wout, 7), v + t) << k << " " << v << " " << t;
        ASSERT_EQ(planesLane(out, wout, 6), 0);
      }
  }
}

struct Case {
  std::vector<char> g;
  std::vector<float> scales;
  TernaryInput in;
};

Case makeCase(ternDataType_t dt, size_t count, uint32_t block, uint64_t seed) {
  Case c;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> nd(0, 1);
  size_t esz = dt == ternFloat32 ? 4 : 2;
  c.g.resize(count * esz + 64);
  for (size_t i = 0; i < count; ++i) {
    float v = nd(rng) * (i % 97 == 0 ? 10.f : 1.f);
    if (dt == ternFloat32) reinterpret_cast<float*>(c.g.data())[i] = v;
    else if (dt == ternFloat16) reinterpret_cast<uint16_t*>(c.g.data())[i] = floatToHalf(v);
    else reinterpret_cast<uint16_t*>(c.g.data())[i] = floatToBf16(v);
  }
  c.scales.resize((count + block - 1) / block + 1);
  ternaryBlockStats(c.g.data(), dt, count, block, c.scales.data(), nullptr);
  c.scales[1 % c.scales.size()] *= 0.5f;  // a clipped block: |g| > s happens
  c.in = {c.g.data(), dt, count, c.scales.data(), block, ternaryKey(seed, 3, seed * 7 + 1)};
  return c;
}

class Simd : public ::testing::TestWithParam<const char*> {};

TEST_P(Simd, BitIdenticalToScalarAndToPerElementMath) {
  const TernaryKernels* simd = ternaryKernelsFor(GetParam());
  if (!simd) GTEST_SKIP() << GetParam() << " not supported by this CPU";
  const TernaryKernels& ref = *ternaryKernelsFor("scalar");
  for (ternDataType_t dt : {ternFloat32, ternFloat16, ternBfloat16})
    for (size_t count : {1ul, 63ul, 64ul, 1000ul, 4096ul + 17})
      for (uint32_t block : {64u, 256u}) {
        Case c = makeCase(dt, count, block, count * 31 + block + dt);
        size_t groups = (count + 31) / 32;
        for (size_t g0 : {0ul, 1ul}) {
          if (g0 >= groups) continue;
          size_t n = groups - g0;
          std::vector<uint32_t> a(2 * n), b(2 * n);
          ref.encode(c.in, g0, n, a.data());
          simd->encode(c.in, g0, n, b.data());
          ASSERT_EQ(a, b) << "encode dt=" << dt << " count=" << count;
          // The scalar kernel against the per-element definition.
          for (size_t i = 32 * g0; i < count; ++i) {
            uint32_t r = ternaryDraw(c.in.key, i);
            int t = ternaryCode(ternaryLoad(c.g.data(), dt, i), c.scales[i / block], r);
            ASSERT_EQ(planesLane(&a[2 * (i / 32 - g0)], 2, i % 32), t) << i;
          }
          for (int win : {2, 3, 4}) {
            int wout = win + 1;
            std::vector<uint32_t> in(win * n), x(wout * n), y(wout * n);
            for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<uint32_t>(k * 2654435761u);
            // keep values small enough: clear the top plane, sign-extend
            for (size_t k = 0; k < n; ++k) in[win * k + win - 1] = in[win * k + win - 2];
            ref.addEncode(c.in, g0, n, in.data(), win, x.data(), wout);
            simd->addEncode(c.in, g0, n, in.data(), win, y.data(), wout);
            ASSERT_EQ(x, y) << "addEncode win=" << win;
            std::vector<float> d1(count + 32, -1), d2(count + 32, -1);
            ref.decode(x.data(), wout, g0, n, c.scales.data(), block, count, ternFloat32, 3, d1.data());
            simd->decode(x.data(), wout, g0, n, c.scales.data(), block, count, ternFloat32, 3, d2.data());
            for (size_t i = 0; i < d1.size(); ++i)
              ASSERT_EQ(std::memcmp(&d1[i], &d2[i], 4), 0) << "decode at " << i;
          }
        }
      }
}

// Block maxima and sums of squares: the same bits as the scalar reference
// (whose lane order the CUDA kernel repeats), ragged blocks and NaN included;
// and the maxima are the true ones.
TEST_P(Simd, BlockStatsBitIdenticalToScalar) {
  const TernaryKernels* simd = ternaryKernelsFor(GetParam());
  if (!simd) GTEST_SKIP() << GetParam() << " not supported by this CPU";
  const TernaryKernels& ref = *ternaryKernelsFor("scalar");
  for (ternDataType_t dt : {ternFloat32, ternFloat16, ternBfloat16})
    for (size_t count : {1ul, 15ul, 64ul, 1000ul, 4096ul + 17})
      for (uint32_t block : {64u, 256u}) {
        Case c = makeCase(dt, count, block, count + block + dt);
        if (count > 100) {  // a NaN inside a block's body
          float nan = std::nanf("");
          if (dt == ternFloat32) reinterpret_cast<float*>(c.g.data())[70] = nan;
          else reinterpret_cast<uint16_t*>(c.g.data())[70] = dt == ternFloat16 ? 0x7e00 : 0x7fc0;
        }
        size_t nb = (count + block - 1) / block;
        std::vector<float> m0(nb), m1(nb), q0(nb), q1(nb), m2(nb);
        ref.blockStats(c.g.data(), dt, count, block, m0.data(), q0.data());
        simd->blockStats(c.g.data(), dt, count, block, m1.data(), q1.data());
        simd->blockStats(c.g.data(), dt, count, block, m2.data(), nullptr);
        ASSERT_EQ(0, memcmp(m0.data(), m1.data(), nb * 4)) << "max dt=" << dt << " count=" << count;
        ASSERT_EQ(0, memcmp(q0.data(), q1.data(), nb * 4)) << "sumSq dt=" << dt << " count=" << count;
        ASSERT_EQ(0, memcmp(m0.data(), m2.data(), nb * 4)) << "max without sums dt=" << dt;
        for (size_t b = 0; b < nb; ++b) {
          float want = 0;
          for (size_t i = b * block; i < std::min(count, (b + 1) * block); ++i) {
            float a = std::fabs(ternaryLoad(c.g.data(), dt, i));
            want = a > want ? a : want;
          }
          ASSERT_EQ(m0[b], want) << b;
        }
      }
}

INSTANTIATE_TEST_SUITE_P(Isa, Simd, ::testing::Values("avx2", "avx512"),
                         [](const auto& info) { return std::string(info.param); });

// Error feedback, the two-pass way the allreduce computed it before the
// fusion (and the definition): v = g + residual as float32 into a buffer,
// the codes of v, then residual = v - decode(codes) for the groups coded.
struct TwoPass {
  std::vector<uint32_t> codes;
  std::vector<float> residual;
};

TwoPass twoPassReference(const Case& c, size_t g0, size_t n, std::vector<float> residual,
                         const uint32_t* planes, int win) {
  const TernaryKernels& ref = *ternaryKernelsFor("scalar");
  std::vector<float> v(c.in.count);
  for (size_t i = 0; i < v.size(); ++i) v[i] = ternaryLoad(c.in.g, c.in.dt, i) + residual[i];
  TernaryInput in = c.in;
  in.g = v.data();
  in.dt = ternFloat32;
  TwoPass out;
  const int wout = planes ? win + 1 : 2;
  out.codes.resize(wout * n);
  if (planes) ref.addEncode(in, g0, n, planes, win, out.codes.data(), wout);
  else ref.encode(in, g0, n, out.codes.data());
  std::vector<uint32_t> own(2 * n);
  ref.encode(in, g0, n, own.data());  // the second pass over the random stream
  std::vector<float> st(v.size());
  ref.decode(own.data(), 2, g0, n, c.in.scales, c.in.block, c.in.count, ternFloat32, 0, st.data());
  for (size_t i = 32 * g0; i < std::min(c.in.count, 32 * (g0 + n)); ++i) residual[i] = v[i] - st[i];
  out.residual = std::move(residual);
  return out;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

// The fused pass (TernaryInput::residual) of every kernel this CPU runs
// against the two-pass reference: codes and residuals bit for bit, over
// several calls that carry the residual, encode and add-encode, sub-ranges
// that start mid super-group (residuals outside the range untouched).
class FusedErrorFeedback : public ::testing::TestWithParam<const char*> {};

TEST_P(FusedErrorFeedback, EqualsTheTwoPassReferenceBitForBit) {
  const TernaryKernels* k = ternaryKernelsFor(GetParam());
  if (!k) GTEST_SKIP() << GetParam() << " not supported by this CPU";
  for (ternDataType_t dt : {ternFloat32, ternFloat16, ternBfloat16})
    for (size_t count : {1ul, 63ul, 64ul, 1000ul, 4096ul + 17})
      for (uint32_t block : {64u, 256u}) {
        Case c = makeCase(dt, count, block, count * 7 + block + dt);
        const size_t groups = (count + 31) / 32;
        std::mt19937 rng(static_cast<uint32_t>(count + dt));
        std::normal_distribution<float> nd(0, 0.5f);
        std::vector<float> residual(count);
        for (float& r : residual) r = nd(rng) * c.scales[0];
        for (int call = 0; call < 4; ++call) {  // the residual carried from call to call
          c.in.key = ternaryKey(5, 2, call);
          const size_t g0 = call % 2 ? std::min<size_t>(1, groups - 1) : 0, n = groups - g0;
          const int win = 2 + call % 3;
          std::vector<uint32_t> planes(win * n);
          for (size_t q = 0; q < n; ++q)  // arbitrary sums, sign-extended
            for (int j = 0; j < win; ++j)
              planes[win * q + j] = static_cast<uint32_t>((q + 1) * 2654435761u >> (j == win - 1 ? 1 : j));
          for (size_t q = 0; q < n; ++q) planes[win * q + win - 1] = planes[win * q + win - 2];
          const uint32_t* in = call >= 2 ? planes.data() : nullptr;  // encode, then add-encode
          TwoPass want = twoPassReference(c, g0, n, residual, in, win);
          TernaryInput fused = c.in;
          fused.residual = residual.data();
          std::vector<uint32_t> got(want.codes.size());
          if (in) k->addEncode(fused, g0, n, in, win, got.data(), win + 1);
          else k->encode(fused, g0, n, got.data());
          ASSERT_EQ(got, want.codes) << GetParam() << " dt=" << dt << " count=" << count << " call=" << call;
          ASSERT_TRUE(sameBits(residual, want.residual))
              << GetParam() << " residual dt=" << dt << " count=" << count << " call=" << call;
        }
      }
}

INSTANTIATE_TEST_SUITE_P(Isa, FusedErrorFeedback, ::testing::Values("scalar", "avx2", "avx512"),
                         [](const auto& info) { return std::string(info.param); });

TEST(TernaryStats, UnbiasedWithTheExpectedVariance) {
  // One block, s = 1; values spread over (0, 1]; 20000 independent calls.
  const size_t count = 64;
  std::vector<float> g(count), scale(1, 1.0f);
  for (size_t i = 0; i < count; ++i) g[i] = (i % 2 ? -1.f : 1.f) * (0.02f + 0.98f * i / count);
  const int calls = 20000;
  std::vector<double> sum(count, 0), sumSq(count, 0);
  std::vector<uint32_t> planes(2 * 2);
  for (int call = 0; call < calls; ++call) {
    TernaryInput in{g.data(), ternFloat32, count, scale.data(), 64, ternaryKey(42, 0, call)};
    ternaryKernels().encode(in, 0, 2, planes.data());
    for (size_t i = 0; i < count; ++i) {
      double v = planesLane(&planes[2 * (i / 32)], 2, i % 32);
      sum[i] += v;
      sumSq[i] += v * v;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    double mean = sum[i] / calls, a = std::fabs(g[i]);
    double var = a - a * a;  // s|g| - g^2 with s = 1
    double z = (mean - g[i]) / std::sqrt(var / calls);
    EXPECT_LT(std::fabs(z), 4.5) << "element " << i << " mean " << mean << " g " << g[i];
    double empVar = sumSq[i] / calls - mean * mean;
    EXPECT_NEAR(empVar, var, 5 * std::sqrt(2.0 / calls) * std::max(var, 0.01)) << i;
  }
}

TEST(TernaryStats, MaximalMagnitudesAreDeterministic) {
  std::vector<float> g = {2.f, -2.f, 0.f, 2.f}, scale(1, 2.0f);
  g.resize(64, -2.f);
  std::vector<uint32_t> p(4);
  TernaryInput in{g.data(), ternFloat32, g.size(), scale.data(), 64, ternaryKey(1, 0, 0)};
  ternaryKernels().encode(in, 0, 2, p.data());
  EXPECT_EQ(planesLane(p.data(), 2, 0), 1);
  EXPECT_EQ(planesLane(p.data(), 2, 1), -1);
  EXPECT_EQ(planesLane(p.data(), 2, 2), 0);
  EXPECT_EQ(planesLane(&p[2], 2, 31), -1);
}

}  // namespace
}  // namespace tern
