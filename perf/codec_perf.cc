// codec_perf: single-core throughput of the ternary codec kernels, per ISA,
// in GB/s of float32 input (the fused decode-add-encode step is the one a
// ring hop runs), and the encode with error feedback: fused (one pass reads
// g and the residual, writes codes and the new residual) against the two
// passes the allreduce made before (g + residual into a buffer, the encode,
// then the codes drawn again, decoded and subtracted).
// Usage: codec_perf [elements] [iterations]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "codec/ternary_cpu.h"

using namespace tern;

// Variance added by ternarization, E[(s t - g)^2] = s|g| - g^2, relative to
// sum g^2, for heavy-tailed synthetic gradients, against the bits the block
// scales cost on the wire (an allreduce of one float per block).
// The two-pass error feedback (the allreduce's until 2026-11-27): v = g + e,
// codes of v, then e = v - s t in slices of 64 groups (cache-resident).
static void twoPassErrorFeedback(const TernaryKernels& k, const TernaryInput& in, float* e,
                                 float* v, uint32_t* codes) {
  const float* g = static_cast<const float*>(in.g);
  for (size_t i = 0; i < in.count; ++i) v[i] = g[i] + e[i];
  TernaryInput corrected = in;
  corrected.g = v;
  const size_t groups = (in.count + 31) / 32;
  k.encode(corrected, 0, groups, codes);
  uint32_t planes[2 * 64];
  for (size_t q = 0; q < groups; q += 64) {
    size_t n = std::min<size_t>(64, groups - q);
    k.encode(corrected, q, n, planes);
    k.decode(planes, 2, q, n, in.scales, in.block, in.count, ternFloat32, 0, e);
    for (size_t i = 32 * q, end = std::min(in.count, 32 * (q + n)); i < end; ++i) e[i] = v[i] - e[i];
  }
}

static void blockSizeTable(int nranks) {
  const size_t count = 1 << 22;
  std::vector<float> g(count);
  uint64_t x = 88172645463325252ull;
  auto uni = [&] {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return (static_cast<double>(x >> 11) + 0.5) / 9007199254740992.0;
  };
  for (size_t i = 0; i < count; ++i) {  // gaussian x lognormal: a few large entries
    double z = std::sqrt(-2 * std::log(uni())) * std::cos(6.283185307179586 * uni());
    double w = std::sqrt(-2 * std::log(uni())) * std::cos(6.283185307179586 * uni());
    float layer = static_cast<float>(1.0 + 9.0 * ((i >> 18) % 4));  // 4 "layers" of scale
    g[i] = static_cast<float>(z * std::exp(0.75 * w)) * layer * 1e-3f;
  }
  double g2 = 0;
  for (float v : g) g2 += static_cast<double>(v) * v;
  printf("# block size vs added variance (relative to |g|^2) and scale bits, %d ranks\n", nranks);
  printf("# %8s %14s %16s %14s\n", "block", "var/|g|^2", "scale bits/elem", "ternary bits");
  for (uint32_t B : {64u, 128u, 256u, 512u, 1024u, 4096u, 16384u}) {
    std::vector<float> s(count / B + 1);
    ternaryBlockStats(g.data(), ternFloat32, count, B, s.data(), nullptr);
    double var = 0;
    for (size_t i = 0; i < count; ++i) {
      double a = std::fabs(g[i]);
      var += s[i / B] * a - a * a;
    }
    double scaleBits = 64.0 * (nranks - 1) / nranks / B;
    double bits = 0;
    for (int k = 1; k < nranks; ++k) bits += ternaryWidth(k);
    bits = (bits + (nranks - 1) * ternaryWidth(nranks)) / nranks;
    printf("  %8u %14.3f %16.4f %14.2f\n", B, var / g2, scaleBits, bits);
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "--blocks")) {
    blockSizeTable(argc > 2 ? atoi(argv[2]) : 4);
    return 0;
  }
  size_t count = argc > 1 ? strtoull(argv[1], nullptr, 0) : (4u << 20);
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  count = count / 64 * 64;
  const uint32_t block = 512;
  std::vector<float> g(count), scales(count / block + 1), out(count);
  for (size_t i = 0; i < count; ++i) g[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.f - 1.f;
  ternaryBlockStats(g.data(), ternFloat32, count, block, scales.data(), nullptr);
  size_t groups = count / 32;
  std::vector<uint32_t> in(groups * 4, 0x5555aaaau), planes(groups * 5);
  TernaryInput ti{g.data(), ternFloat32, count, scales.data(), block, ternaryKey(7, 1, 3)};
  printf("# ternary codec, %zu float32 elements, one core, GB/s of float32 input\n", count);
  std::vector<float> residual(count, 0.0f), corrected(count);
  printf("# %-8s %10s %14s %10s %10s %12s %12s\n", "isa", "encode", "add(w3->w4)", "decode", "memcpy",
         "EF 2-pass", "EF fused");
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    const TernaryKernels* k = ternaryKernelsFor(isa);
    if (!k) {
      printf("  %-8s (not supported by this CPU)\n", isa);
      continue;
    }
    auto time = [&](auto fn) {
      fn();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) fn();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      return count * 4.0 / s / 1e9;
    };
    double enc = time([&] { k->encode(ti, 0, groups, planes.data()); });
    double add = time([&] { k->addEncode(ti, 0, groups, in.data(), 3, planes.data(), 4); });
    double dec = time([&] {
      k->decode(planes.data(), 4, 0, groups, scales.data(), block, count, ternFloat32, 0, out.data());
    });
    double cpy = time([&] { memcpy(out.data(), g.data(), count * 4); });
    // Interleaved, each best of 3, so a phase of the host's load hits both.
    double two = 0, fused = 0;
    TernaryInput ef = ti;
    ef.residual = residual.data();
    for (int rep = 0; rep < 3; ++rep) {
      two = std::max(two, time([&] {
        twoPassErrorFeedback(*k, ti, residual.data(), corrected.data(), planes.data());
      }));
      fused = std::max(fused, time([&] { k->encode(ef, 0, groups, planes.data()); }));
    }
    printf("  %-8s %10.2f %14.2f %10.2f %10.2f %12.2f %12.2f\n", isa, enc, add, dec, cpy, two, fused);
  }
  return 0;
}
