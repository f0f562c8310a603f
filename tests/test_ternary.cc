// ternAllReduceTernary over real processes: bit-exact results (deterministic
// inputs, and seeded random inputs recomputed from the Philox stream) for
// 1..6 ranks, odd sizes, chunk edges and every width jump; unbiasedness end
// to end; wire accounting against the formula; fallback; error feedback;
// bad arguments; mismatched calls fail instead of overrunning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codec/ternary_math.h"
#include "harness.h"

using namespace terntest;
using tern::floatToBf16;
using tern::floatToHalf;

namespace {

constexpr uint64_t kSeed = 12345;

// Rank r's input element i: a reproducible value anyone can recompute.
float gradient(int r, size_t i, bool deterministic, uint32_t block) {
  if (deterministic) {  // magnitude = the block's global max, sign varies, some zeros
    float m = 0.5f + static_cast<float>((i / block) % 7);
    int k = static_cast<int>((i * 7 + r * 3) % 5);
    return k == 0 ? 0.0f : (k % 2 ? m : -m);
  }
  uint32_t x = static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>(r * 40503u + 17);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (static_cast<float>(x % 20001) - 10000.0f) / 3000.0f;
}

void storeAs(ternDataType_t dt, void* buf, size_t i, float v) {
  if (dt == ternFloat16) static_cast<uint16_t*>(buf)[i] = floatToHalf(v);
  else if (dt == ternBfloat16) static_cast<uint16_t*>(buf)[i] = floatToBf16(v);
  else static_cast<float*>(buf)[i] = v;
}

float loadAs(ternDataType_t dt, const void* buf, size_t i) {
  if (dt == ternFloat16) return tern::halfToFloat(static_cast<const uint16_t*>(buf)[i]);
  if (dt == ternBfloat16) return tern::bf16ToFloat(static_cast<const uint16_t*>(buf)[i]);
  return static_cast<const float*>(buf)[i];
}

// The independent reference: every rank's codes recomputed element by element.
std::vector<float> reference(int nranks, size_t count, ternDataType_t dt, ternRedOp_t op,
                             bool det, uint32_t block, uint64_t call) {
  size_t nb = (count + block - 1) / block;
  std::vector<float> scale(nb, 0.0f), out(count);
  auto in = [&](int r, size_t i) {  // as the library sees it after the dtype round trip
    char tmp[4];
    storeAs(dt, tmp, 0, gradient(r, i, det, block));
    return loadAs(dt, tmp, 0);
  };
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < count; ++i) scale[i / block] = std::max(scale[i / block], std::fabs(in(r, i)));
  if (nranks == 1) {  // one rank: the call runs dense, an exact copy
    for (size_t i = 0; i < count; ++i) out[i] = in(0, i);
    return out;
  }
  for (size_t i = 0; i < count; ++i) {
    int sum = 0;
    for (int r = 0; r < nranks; ++r) {
      tern::TernaryKey key = tern::ternaryKey(kSeed, static_cast<uint32_t>(r), call);
      sum += tern::ternaryCode(in(r, i), scale[i / block], tern::ternaryDraw(key, i));
    }
    char tmp[4];
    storeAs(dt, tmp, 0, tern::ternaryDecode(sum, scale[i / block], op == ternAvg ? nranks : 0));
    out[i] = loadAs(dt, tmp, 0);
  }
  return out;
}

void setConfig(ternComm_t comm, uint32_t block, int ef = 0) {
  ternTernaryConfig_t cfg;
  ternCommGetTernaryConfig(comm, &cfg);
  cfg.seed = kSeed;
  cfg.blockSize = static_cast<int>(block);
  cfg.minBytes = 0;
  cfg.errorFeedback = ef;
  ternCommSetTernaryConfig(comm, &cfg);
}

// One sweep of bit-exact calls: every input kind, datatype, op, count (but
// those `skip` leaves out) and place, each result against want(count, dt,
// op, det, call); `call` counts the calls that drew codes (`draws`).
using Want = std::function<std::vector<float>(size_t, ternDataType_t, ternRedOp_t, bool, uint64_t)>;
int exactSweep(RankCtx& ctx, ternComm_t comm, const std::vector<size_t>& counts,
               const std::function<bool(bool, ternDataType_t, size_t)>& skip, const Want& want, bool draws) {
  const uint32_t block = 128;
  int fails = 0;
  uint64_t call = 0;
  for (bool det : {true, false})
    for (ternDataType_t dt : {ternFloat32, ternFloat16, ternBfloat16})
      for (ternRedOp_t op : {ternSum, ternAvg})
        for (size_t count : counts) {
          if (skip(det, dt, count)) continue;
          setConfig(comm, block);
          size_t esz = dt == ternFloat32 ? 4 : 2;
          for (bool inplace : {false, true}) {
            std::vector<char> send(count * esz), recv(count * esz);
            for (size_t i = 0; i < count; ++i) storeAs(dt, send.data(), i, gradient(ctx.rank, i, det, block));
            char* s = inplace ? recv.data() : send.data();
            if (inplace) recv = send;
            ternResult_t r = ternAllReduceTernary(s, recv.data(), count, dt, op, comm, nullptr);
            if (r != ternSuccess) return fails + failf(ctx, "ternary failed: %s", ternGetLastError(comm));
            std::vector<float> expected = want(count, dt, op, det, call);
            if (draws) ++call;  // fallbacks draw nothing
            for (size_t i = 0; i < count; ++i) {
              float got = loadAs(dt, recv.data(), i);
              if (std::memcmp(&got, &expected[i], 4) != 0) {
                fails += failf(ctx, "%s dt=%d op=%d count=%zu %s: element %zu is %g, want %g",
                               det ? "deterministic" : "random", dt, op, count,
                               inplace ? "in-place" : "out-of-place", i, got, expected[i]);
                break;
              }
            }
          }
        }
  return fails;
}

// Far from a dense reference: random inputs in the other datatypes only at
// small counts (keeps the reference cheap).
bool cheapOnly(bool det, ternDataType_t dt, size_t count) { return !det && dt != ternFloat32 && count > 2000; }

int exactBody(RankCtx& ctx) {
  setenv("TERN_CHUNKSIZE", "4096", 1);  // 256-group chunks: chunk edges at small sizes
  setenv("TERN_BUFFSIZE", "16384", 1);
  ternComm_t comm = ctx.comm(0);
  const size_t n = ctx.nranks;
  int fails = exactSweep(ctx, comm, {1, 31, 33, 1000, 8192 * n - 1, 8192 * n + 77, 100003}, cheapOnly,
                         [&](size_t count, ternDataType_t dt, ternRedOp_t op, bool det, uint64_t call) {
                           return reference(ctx.nranks, count, dt, op, det, 128, call);
                         },
                         ctx.nranks > 1);
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

class TernaryExact : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(TernaryExact, BitExactAgainstTheReference) {
  auto [transport, nranks] = GetParam();
  expectAllRanksOk(runRanks(nranks, {{"TERN_TRANSPORT", transport}, {"TERN_TIMEOUT", "60"}},
                         exactBody, 1, 600));
}

INSTANTIATE_TEST_SUITE_P(Ranks, TernaryExact,
                         ::testing::Combine(::testing::Values("shm"),
                                            ::testing::Values(1, 2, 3, 4, 5, 6)),
                         [](const auto& info) { return transportRanksName(info); });
INSTANTIATE_TEST_SUITE_P(Tcp, TernaryExact,
                         ::testing::Combine(::testing::Values("tcp"), ::testing::Values(3)),
                         [](const auto& info) { return transportRanksName(info); });

// The two-level form's reference (hosts of two ranks each, so that a host's
// sum is one addition, the same in any order; more ranks a host only with
// the deterministic inputs, whose sums are exact): host sums rounded to the
// datatype, scales from them, and per slice the codes of rank j of every
// host, drawn from that rank's Philox stream; slices of whole blocks, as
// the library cuts them.
std::vector<float> referenceTwoLevel(const std::string& hosts, size_t count, ternDataType_t dt,
                                     ternRedOp_t op, bool det, uint32_t block, uint64_t call) {
  std::vector<std::vector<int>> members;  // hosts in order of their lowest rank
  std::string seen;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    size_t h = seen.find(hosts[r]);
    if (h == std::string::npos) h = seen.size(), seen += hosts[r], members.emplace_back();
    members[h].push_back(r);
  }
  const int N = static_cast<int>(hosts.size()), L = static_cast<int>(members[0].size());
  auto rounded = [&](float v) {
    char tmp[4];
    storeAs(dt, tmp, 0, v);
    return loadAs(dt, tmp, 0);
  };
  auto hostSum = [&](const std::vector<int>& m, size_t i) {
    float sum = 0;
    for (int r : m) sum += rounded(gradient(r, i, det, block));
    return rounded(sum);
  };
  const size_t units = (count + block - 1) / block;
  auto sliceOf = [&](size_t i) {  // the local rank whose slice holds element i
    for (int j = L - 1; j >= 0; --j)
      if (i >= (units / L * j + std::min<size_t>(units % L, j)) * block) return j;
    return 0;
  };
  std::vector<float> scale((count + block - 1) / block, 0.0f), out(count);
  for (const auto& m : members)
    for (size_t i = 0; i < count; ++i) scale[i / block] = std::max(scale[i / block], std::fabs(hostSum(m, i)));
  for (size_t i = 0; i < count; ++i) {
    int sum = 0;
    for (const auto& m : members) {
      tern::TernaryKey key = tern::ternaryKey(kSeed, static_cast<uint32_t>(m[sliceOf(i)]), call);
      sum += tern::ternaryCode(hostSum(m, i), scale[i / block], tern::ternaryDraw(key, i));
    }
    out[i] = rounded(tern::ternaryDecode(sum, scale[i / block], op == ternAvg ? N : 0));
  }
  return out;
}

// Two levels, bit for bit: 2 and 3 hosts of 2 ranks and 2 of 3 (TERN_HOST_ID),
// every datatype and op, odd sizes, sizes whose last slices are empty, chunk
// edges; uneven hosts (2+1) run the flat form, checked against its reference.
int twoLevelExactBody(RankCtx& ctx, const std::string& hosts) {
  auto ranksOn = [&](char h) { return std::count(hosts.begin(), hosts.end(), h); };
  const bool even = std::all_of(hosts.begin(), hosts.end(), [&](char h) { return ranksOn(h) == ranksOn(hosts[0]); });
  const bool pairs = even && ranksOn(hosts[0]) == 2;
  setenv("TERN_HOST_ID", std::string(1, hosts[ctx.rank]).c_str(), 1);
  setenv("TERN_CHUNKSIZE", "4096", 1);
  setenv("TERN_BUFFSIZE", "16384", 1);
  ternComm_t comm = ctx.comm(0);
  // A host sum of 3 floats depends on their order: random inputs only in pairs.
  auto skip = [&](bool det, ternDataType_t dt, size_t count) { return cheapOnly(det, dt, count) || (!det && even && !pairs); };
  int fails = exactSweep(ctx, comm, {1, 100, 129, 1000, 8192 * 2 + 77, 100003}, skip,
                         [&](size_t count, ternDataType_t dt, ternRedOp_t op, bool det, uint64_t call) {
                           return even ? referenceTwoLevel(hosts, count, dt, op, det, 128, call)
                                       : reference(ctx.nranks, count, dt, op, det, 128, call);
                         },
                         true);
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

class TernaryTwoLevel : public ::testing::TestWithParam<std::string> {};

TEST_P(TernaryTwoLevel, BitExactAgainstTheReference) {
  const std::string hosts = GetParam();
  expectAllRanksOk(runRanks(static_cast<int>(hosts.size()), {{"TERN_TIMEOUT", "60"}},
                            [&](RankCtx& c) { return twoLevelExactBody(c, hosts); }, 1, 600));
}

INSTANTIATE_TEST_SUITE_P(Hosts, TernaryTwoLevel, ::testing::Values("aabb", "aabbcc", "aaabbb", "aab"),
                         [](const auto& info) { return info.param; });

// Many calls (fresh draws each): the mean result converges to the true
// average within a z-bound computed from the variance s|g| - g^2.
int unbiasedBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  const size_t count = 2048;
  const uint32_t block = 2048;
  setConfig(comm, block);
  const int calls = 300;
  std::vector<float> g(count), out(count);
  std::vector<double> mean(count, 0);
  for (size_t i = 0; i < count; ++i) g[i] = gradient(ctx.rank, i, false, block);
  for (int k = 0; k < calls; ++k) {
    if (ternAllReduceTernary(g.data(), out.data(), count, ternFloat32, ternAvg, comm, nullptr))
      return failf(ctx, "ternary failed: %s", ternGetLastError(comm));
    for (size_t i = 0; i < count; ++i) mean[i] += out[i] / calls;
  }
  float s = 0;
  for (int r = 0; r < ctx.nranks; ++r)
    for (size_t i = 0; i < count; ++i) s = std::max(s, std::fabs(gradient(r, i, false, block)));
  int outside = 0;
  for (size_t i = 0; i < count; ++i) {
    double truth = 0, var = 0;
    for (int r = 0; r < ctx.nranks; ++r) {
      double v = gradient(r, i, false, block);
      truth += v / ctx.nranks;
      var += (s * std::fabs(v) - v * v) / (double(ctx.nranks) * ctx.nranks);
    }
    double z = (mean[i] - truth) / std::sqrt(var / calls + 1e-30);
    if (std::fabs(z) > 4.5) ++outside;
  }
  ternCommDestroy(comm);
  if (outside > 0) return failf(ctx, "%d of %zu elements beyond 4.5 sigma", outside, count);
  return 0;
}

TEST(Ternary, UnbiasedEndToEnd) {
  expectAllRanksOk(runRanks(3, {}, unbiasedBody, 1, 300));
}

// Wire accounting: the encoded payload of all ranks together is exactly
// 4 bytes x groups x (sum_{k<N} w(k) + (N-1) w(N)), and the per-rank figure
// matches docs/DESIGN.md's bits per element.
int accountingBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  setConfig(comm, 512);
  const size_t count = 1 << 20;
  std::vector<float> g(count, 1.0f), out(count);
  if (ternAllReduceTernary(g.data(), out.data(), count, ternFloat32, ternSum, comm, nullptr))
    return failf(ctx, "ternary failed");
  ternTernaryStats_t st;
  ternCommGetTernaryStats(comm, &st);
  double payload = static_cast<double>(st.payloadBytes);
  ternAllReduce(&payload, &payload, 1, ternFloat64, ternSum, comm, nullptr);
  const int n = ctx.nranks;
  double widths = (n - 1) * tern::ternaryWidth(n);
  for (int k = 1; k < n; ++k) widths += tern::ternaryWidth(k);
  double want = 4.0 * (count / 32) * widths;
  if (payload != want) return failf(ctx, "payload %.0f bytes, formula says %.0f", payload, want);
  double bitsPerElem = 8.0 * st.payloadBytes / count;
  double designBits = widths / n;  // N=2: 2.5, N=4: 5.0
  if (std::fabs(bitsPerElem - designBits) > 0.01)
    return failf(ctx, "%.3f bits/element, design says %.3f", bitsPerElem, designBits);
  // Everything else on the wire (scales, headers) stays small.
  if (st.wireBytes < st.payloadBytes || st.wireBytes > st.payloadBytes * 1.05)
    return failf(ctx, "wire %llu bytes for a %llu-byte payload", st.wireBytes, st.payloadBytes);
  if (st.denseBytes != 2ull * (n - 1) * count * 4 / n) return failf(ctx, "dense bytes wrong");
  ternCommDestroy(comm);
  return 0;
}

TEST(Ternary, WireBytesMatchTheFormula) {
  for (int n : {2, 4}) {
    expectAllRanksOk(runRanks(n, {}, accountingBody, 1, 120));
  }
}

// Error feedback: the transmitted sum over K calls of a fixed gradient stays
// within one scale of K times the true average (the residual is bounded),
// and the residual memory is released with the handle.  `hosts` (optional)
// emulates hosts: the two-level form, each rank coding its slice's host sums
// (two 4096-element slices per host).
int feedbackBody(RankCtx& ctx, const std::string& hosts = "") {
  if (!hosts.empty()) setenv("TERN_HOST_ID", std::string(1, hosts[ctx.rank]).c_str(), 1);
  ternComm_t comm = ctx.comm(0);
  const size_t count = hosts.empty() ? 4096 : 8192;
  setConfig(comm, 4096, 1);
  std::vector<float> g(count), out(count);
  std::vector<double> total(count, 0);
  float s = 0;
  for (size_t i = 0; i < count; ++i) g[i] = gradient(ctx.rank, i, false, 4096) * 0.01f;
  for (int r = 0; r < ctx.nranks; ++r)
    for (size_t i = 0; i < count; ++i) s = std::max(s, std::fabs(gradient(r, i, false, 4096) * 0.01f));
  const int K = 200;
  for (int k = 0; k < K; ++k) {
    if (ternAllReduceTernaryEx(g.data(), out.data(), count, ternFloat32, ternAvg, g.data(), comm, nullptr))
      return failf(ctx, "ternary failed: %s", ternGetLastError(comm));
    for (size_t i = 0; i < count; ++i) total[i] += out[i];
  }
  for (size_t i = 0; i < count; ++i) {
    double truth = 0;
    for (int r = 0; r < ctx.nranks; ++r) truth += gradient(r, i, false, 4096) * 0.01f / ctx.nranks;
    if (std::fabs(total[i] - K * truth) > 2.0 * s + 1e-3)
      return failf(ctx, "element %zu: sum %g vs %g (scale %g)", i, total[i], K * truth, s);
  }
  if (ternCommReleaseTensor(comm, g.data()) != ternSuccess) return failf(ctx, "release failed");
  ternCommDestroy(comm);
  return 0;
}

TEST(Ternary, ErrorFeedbackBoundsTheAccumulatedError) {
  expectAllRanksOk(runRanks(2, {}, [](RankCtx& c) { return feedbackBody(c); }, 1, 120));
}

TEST(TernaryTwoLevel, ErrorFeedbackBoundsTheAccumulatedError) {
  expectAllRanksOk(runRanks(4, {{"TERN_TIMEOUT", "60"}}, [](RankCtx& c) { return feedbackBody(c, "aabb"); }, 1, 300));
}

// Error feedback end to end, bit for bit: every rank's residuals carried
// through K calls in an independent model written from the definition
// (v = g + e, t from v against the scale of g, e = v - s t, each element
// once a call), whose decoded sums the library's must equal.  Small chunks
// and odd sizes put chunk edges mid super-group; odd calls run in place;
// bfloat16 input converts before the residual is added.
int feedbackExactBody(RankCtx& ctx) {
  setenv("TERN_CHUNKSIZE", "4096", 1);
  setenv("TERN_BUFFSIZE", "16384", 1);
  ternComm_t comm = ctx.comm(0);
  const uint32_t block = 128;
  setConfig(comm, block, 1);
  const int n = ctx.nranks;
  uint64_t call = 0;
  for (ternDataType_t dt : {ternFloat32, ternBfloat16})
    for (size_t count : {1000ul, 8192ul * n + 77}) {
      const size_t esz = dt == ternFloat32 ? 4 : 2, nb = (count + block - 1) / block;
      std::vector<std::vector<float>> e(n, std::vector<float>(count, 0.0f));  // every rank's residual
      for (int k = 0; k < 4; ++k, ++call) {
        auto in = [&](int r, size_t i) {  // a new gradient each call, after the dtype round trip
          char tmp[4];
          storeAs(dt, tmp, 0, gradient(r, i + 7919 * k, false, block));
          return loadAs(dt, tmp, 0);
        };
        std::vector<char> send(count * esz), recv(count * esz);
        for (size_t i = 0; i < count; ++i) storeAs(dt, send.data(), i, in(ctx.rank, i));
        const bool inplace = k % 2 == 1;
        if (inplace) recv = send;
        // The tensor handle is the count: one residual per (dtype, size).
        const void* handle = reinterpret_cast<const void*>(count * 4 + dt);
        if (ternAllReduceTernaryEx(inplace ? recv.data() : send.data(), recv.data(), count, dt, ternAvg,
                                   handle, comm, nullptr) != ternSuccess)
          return failf(ctx, "ternary with error feedback failed: %s", ternGetLastError(comm));
        std::vector<float> scale(nb, 0.0f);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i) scale[i / block] = std::max(scale[i / block], std::fabs(in(r, i)));
        for (size_t i = 0; i < count; ++i) {
          const float s = scale[i / block];
          int sum = 0;
          for (int r = 0; r < n; ++r) {
            const float v = in(r, i) + e[r][i];
            const int t = tern::ternaryCode(v, s, tern::ternaryDraw(tern::ternaryKey(kSeed, r, call), i));
            e[r][i] = v - static_cast<float>(t) * s;
            sum += t;
          }
          char tmp[4];
          storeAs(dt, tmp, 0, tern::ternaryDecode(sum, s, n));
          const float want = loadAs(dt, tmp, 0), got = loadAs(dt, recv.data(), i);
          if (std::memcmp(&got, &want, 4) != 0)
            return failf(ctx, "dt=%d count=%zu call %d: element %zu is %g, want %g", dt, count, k, i, got, want);
        }
      }
    }
  ternCommDestroy(comm);
  return 0;
}

TEST(Ternary, ErrorFeedbackEqualsTheDefinitionBitForBit) {
  for (int n : {2, 3, 5}) expectAllRanksOk(runRanks(n, {}, feedbackExactBody, 1, 120));
}

// Ranks that disagree on the count: the headers differ, and every rank gets
// an error instead of reading past a chunk.
int mismatchBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  setConfig(comm, 128);
  size_t count = ctx.rank == 0 ? 100000 : 100000 + 64 * 40;
  std::vector<float> g(count, 1.0f), out(count);
  ternResult_t r = ternAllReduceTernary(g.data(), out.data(), count, ternFloat32, ternSum, comm, nullptr);
  // The operation descriptors differ: both ranks say so, naming both sides.
  const char* err = ternGetLastError(comm);
  if (r != ternInvalidUsage || !strstr(err, "100000 float32") || !strstr(err, "102560 float32"))
    return failf(ctx, "mismatched counts gave %s: %s", ternGetErrorString(r), err);
  ternCommAbort(comm);
  return 0;
}

TEST(Ternary, MismatchedCallsFailInsteadOfOverrunning) {
  expectAllRanksOk(runRanks(2, {{"TERN_TIMEOUT", "5"}}, mismatchBody, 1, 60));
}

// Fallbacks, and bad arguments with their sentences.
int fallbackBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  std::vector<float> g(100, 0.25f), out(100);
  if (ternAllReduceTernary(g.data(), out.data(), 100, ternFloat32, ternSum, comm, nullptr) ||
      out[99] != 0.25f * ctx.nranks)
    return failf(ctx, "small-buffer fallback gave %g", out[99]);
  ternTernaryStats_t st;
  ternCommGetTernaryStats(comm, &st);
  if (st.fallbacks != 1 || st.calls != 1) return failf(ctx, "fallback not counted");
  int64_t ints[4] = {};
  if (ternAllReduceTernary(ints, ints, 4, ternInt64, ternSum, comm, nullptr) != ternInvalidArgument ||
      !strstr(ternGetLastError(comm), "float32"))
    return failf(ctx, "int64 not rejected with a sentence");
  if (ternAllReduceTernary(g.data(), out.data(), 100, ternFloat32, ternMax, comm, nullptr) !=
          ternInvalidArgument || !strstr(ternGetLastError(comm), "ternSum"))
    return failf(ctx, "max not rejected with a sentence");
  ternTernaryConfig_t cfg;
  ternCommGetTernaryConfig(comm, &cfg);
  cfg.blockSize = 100;
  if (ternCommSetTernaryConfig(comm, &cfg) != ternInvalidArgument) return failf(ctx, "block 100 accepted");
  ternCommDestroy(comm);
  return 0;
}

TEST(Ternary, FallbackAndBadArguments) {
  for (int n : {1, 2}) {
    expectAllRanksOk(runRanks(n, {}, fallbackBody, 1, 60));
  }
}

}  // namespace
