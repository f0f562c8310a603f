// Ternary-compressed ring allreduce (TernGrad-style), see DESIGN.md.
//
//   1. scales: per block of B elements, max |g| made global by a small dense
//      allreduce-max (exact, order-independent); optionally clipped at
//      clip * sigma, sigma from a dense allreduce-sum of g^2.
//   2. reduce-scatter in 32-element groups of bit planes: a chunk holding the
//      sum of k ranks travels at w(k) = floor(log2 k) + 2 bits; every hop
//      decodes, adds its own code (computed on the fly from g, never stored)
//      and re-encodes at w(k + 1) in one pass (TernaryKernels::addEncode).
//   3. allgather of the w(N)-bit sums, each hop forwarding the chunk and
//      decoding it (x scale, / N for ternAvg) into recvbuff on the way.
//
// Chunks go in framed codec steps (primitives.h): the receiver checks width
// and group count in each header before touching the payload.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "codec/ternary_cpu.h"
#include "collectives/collectives.h"
#include "collectives/primitives.h"
#include "collectives/ternary.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

namespace tern {

ternTernaryConfig_t ternaryConfigFromEnv() {
  ternTernaryConfig_t c;
  c.seed = static_cast<unsigned long long>(envInt("TERN_TERNARY_SEED", 0x7465726e));
  c.blockSize = static_cast<int>(envInt("TERN_TERNARY_BLOCK", 256));  // docs/TERNARY.md: why 256
  const char* clip = getenv("TERN_TERNARY_CLIP");
  c.clip = clip && *clip ? static_cast<float>(atof(clip)) : 0.0f;
  c.errorFeedback = static_cast<int>(envInt("TERN_TERNARY_EF", 0));
  c.minBytes = static_cast<size_t>(envInt("TERN_TERNARY_MIN_BYTES", 64 << 10));
  return c;
}

const char* ternaryConfigProblem(const ternTernaryConfig_t& c) {
  if (c.blockSize < 64 || c.blockSize % 64) return "blockSize must be a positive multiple of 64";
  if (!(c.clip >= 0)) return "clip must be >= 0 (0 turns clipping off)";
  if (c.errorFeedback != 0 && c.errorFeedback != 1) return "errorFeedback must be 0 or 1";
  return nullptr;
}

size_t ternaryFifoQuantum(int nranks) {
  size_t q = 4096;  // pages; also a multiple of the 16-byte headers and 8-byte elements
  for (int w = 2; w <= std::min(ternaryWidth(std::max(nranks, 1)), kTernaryMaxWidth); ++w)
    q = std::lcm(q, static_cast<size_t>(4 * w));
  return q;
}

namespace {

// One codec for every ternary step; what it does is set by its flags.
class TernaryCodec : public GroupCodec {
 public:
  TernaryCodec(const TernaryInput& in, size_t g0, int win, int wout, bool addCode, void* decodeTo,
               ternDataType_t dt, int avgN)
      : in_(in), k_(ternaryKernels()), g0_(g0), win_(win), wout_(wout), add_(addCode),
        dst_(decodeTo), dt_(dt), avgN_(avgN) {}

  void run(const char* in, char* out, size_t first, size_t n) const override {
    size_t q = g0_ + first;
    auto* o = reinterpret_cast<uint32_t*>(out);
    auto* i = reinterpret_cast<const uint32_t*>(in);
    const uint32_t* planes = i;
    int w = win_;
    if (add_) {  // this rank's codes join the sum
      if (i) k_.addEncode(in_, q, n, i, win_, o, wout_);
      else k_.encode(in_, q, n, o);
      planes = o;
      w = wout_;
    } else if (o) {  // allgather: pass the finished sum on
      memcpy(o, i, n * 4 * win_);
    }
    if (dst_) k_.decode(planes, w, q, n, in_.scales, in_.block, in_.count, dt_, avgN_, dst_);
  }

 private:
  TernaryInput in_;
  const TernaryKernels& k_;
  size_t g0_;
  int win_, wout_;
  bool add_;
  void* dst_;
  ternDataType_t dt_;
  int avgN_;
};

uint64_t bytesSentSoFar(const Comm& c) {
  uint64_t sent, recv;
  c.wireBytes(&sent, &recv);
  return sent;
}

// Global per-block scales, identical on every rank.
ternResult_t globalScales(Comm& c, TernaryState& st, const void* g, ternDataType_t dt,
                          size_t count) {
  const uint32_t B = static_cast<uint32_t>(st.cfg.blockSize);
  const size_t nb = (count + B - 1) / B;
  const bool clip = st.cfg.clip > 0;
  st.maxAbs.resize(std::max(st.maxAbs.size(), nb));
  if (clip) st.sumSq.resize(std::max(st.sumSq.size(), nb));
  ternaryBlockStats(g, dt, count, B, st.maxAbs.data(), clip ? st.sumSq.data() : nullptr);
  TERN_CHECK(allReduce(c, st.maxAbs.data(), st.maxAbs.data(), nb, ternFloat32, ternMax));
  if (!clip) return ternSuccess;
  TERN_CHECK(allReduce(c, st.sumSq.data(), st.sumSq.data(), nb, ternFloat32, ternSum));
  for (size_t b = 0; b < nb; ++b) {
    size_t len = std::min<size_t>(B, count - b * B);
    float sigma = std::sqrt(st.sumSq[b] / (static_cast<float>(c.nranks) * len));
    st.maxAbs[b] = std::min(st.maxAbs[b], st.cfg.clip * sigma);
  }
  return ternSuccess;
}

// The ring: reduce-scatter with growing widths, then allgather with decode.
ternResult_t ternaryRing(Comm& c, const TernaryInput& in, void* dst, ternDataType_t dt, int avgN,
                         uint64_t* payload) {
  const int n = c.nranks, r = ringPos(c);  // chunks go by ring position
  const size_t groups = (in.count + kTernaryGroup - 1) / kTernaryGroup;
  const size_t maxCg = std::max<size_t>(2, c.cfg.chunkBytes / 16 / 2 * 2);
  const int wN = ternaryWidth(n);
  Conn* prev = prevConn(c);
  Conn* next = nextConn(c);
  std::vector<std::unique_ptr<TernaryCodec>> codecs;
  Program prog;
  auto add = [&](Conn* from, Conn* to, size_t g0, size_t len, int win, int wout, bool code,
                 bool decode) {
    if (len == 0) return;
    codecs.push_back(std::make_unique<TernaryCodec>(in, g0, win, wout, code,
                                                    decode ? dst : nullptr, dt, avgN));
    Step s;
    s.in = from;
    s.out = to;
    s.bytes = len;
    s.codec = codecs.back().get();
    s.inUnit = 4 * win;
    s.outUnit = 4 * (code ? wout : win);
    prog.add(s);
    if (to) *payload += len * s.outUnit;
  };
  for (size_t base = 0; base < groups;) {
    size_t left = groups - base;
    size_t cg = std::min(maxCg, (left + n - 1) / n);
    cg += cg % 2;  // whole 64-element super-groups for the SIMD kernels
    size_t piece = std::min(left, cg * n);
    auto chunk = [&](int k, size_t* len) {
      size_t first = std::min(static_cast<size_t>(((k % n) + n) % n) * cg, piece);
      *len = std::min(cg, piece - first);
      return base + first;
    };
    size_t len, g0;
    g0 = chunk(r - 1, &len);
    add(nullptr, next, g0, len, 0, ternaryWidth(1), true, false);
    for (int s = 1; s <= n - 2; ++s) {
      g0 = chunk(r - 1 - s, &len);
      add(prev, next, g0, len, ternaryWidth(s), ternaryWidth(s + 1), true, false);
    }
    g0 = chunk(r, &len);
    add(prev, next, g0, len, ternaryWidth(n - 1), wN, true, true);
    for (int t = 1; t <= n - 2; ++t) {
      g0 = chunk(r - t, &len);
      add(prev, next, g0, len, wN, wN, false, true);
    }
    g0 = chunk(r + 1, &len);
    add(prev, nullptr, g0, len, wN, wN, false, true);
    base += piece;
  }
  return runProgram(c, prog, {}, "ternary allreduce");
}

// Error feedback: residual = (g + old residual) - s * t, recomputing t
// exactly from the same Philox stream.
void updateResidual(const TernaryInput& in, std::vector<float>& res) {
  const TernaryKernels& k = ternaryKernels();
  const float* g = static_cast<const float*>(in.g);
  uint32_t planes[2 * 64];
  size_t groups = (in.count + 31) / 32;
  for (size_t q = 0; q < groups; q += 64) {
    size_t n = std::min<size_t>(64, groups - q);
    k.encode(in, q, n, planes);
    for (size_t i = 32 * q; i < std::min(in.count, 32 * (q + n)); ++i) {
      int t = planesLane(&planes[2 * (i / 32 - q)], 2, i % 32);
      res[i] = g[i] - in.scales[i / in.block] * static_cast<float>(t);
    }
  }
}

}  // namespace

ternResult_t allReduceTernary(Comm& c, const void* src, void* dst, size_t count,
                              ternDataType_t dt, ternRedOp_t op, const void* handle) {
  TernaryState& st = *c.ternary;
  const size_t esz = ternTypeSize(dt);
  const char* why = c.nranks == 1 ? "a single rank"
                    : count * esz < st.cfg.minBytes ? "below TERN_TERNARY_MIN_BYTES"
                    : ternaryWidth(c.nranks) > kTernaryMaxWidth ? "more than 511 ranks"
                                                                : nullptr;
  ++st.stats.calls;
  if (why) {
    ++st.stats.fallbacks;
    TERN_LOG(Info, "ternary allreduce of %zu bytes on %d ranks runs dense (%s)", count * esz,
             c.nranks, why);
    return allReduce(c, src, dst, count, dt, op);
  }
  const uint64_t call = st.calls++;
  const uint64_t sentBefore = bytesSentSoFar(c);
  // Scales always come from the raw gradient.  With error feedback the codes
  // are drawn for g + residual, which clips against that scale; the residual
  // then stays below the scale in magnitude (scales taken from g + residual
  // would grow without bound).
  TERN_CHECK(globalScales(c, st, src, dt, count));
  const void* g = src;
  ternDataType_t gdt = dt;
  std::vector<float>* residual = nullptr;
  if (st.cfg.errorFeedback) {
    residual = &st.residuals[handle ? handle : src];
    if (residual->size() != count) residual->assign(count, 0.0f);
    st.corrected.resize(std::max(st.corrected.size(), count));
    for (size_t i = 0; i < count; ++i) st.corrected[i] = ternaryLoad(src, dt, i) + (*residual)[i];
    g = st.corrected.data();
    gdt = ternFloat32;
  }
  TernaryInput in{g, gdt, count, st.maxAbs.data(), static_cast<uint32_t>(st.cfg.blockSize),
                  ternaryKey(st.cfg.seed, static_cast<uint32_t>(c.rank), call)};
  uint64_t payload = 0;
  TERN_CHECK(ternaryRing(c, in, dst, dt, op == ternAvg ? c.nranks : 0, &payload));
  if (residual) updateResidual(in, *residual);
  st.stats.elements += count;
  st.stats.payloadBytes += payload;
  st.stats.wireBytes += bytesSentSoFar(c) - sentBefore;
  st.stats.denseBytes += 2 * (c.nranks - 1) * count * esz / c.nranks;
  TERN_LOG(Trace, "ternary allreduce %zu elements: %llu payload bytes sent (dense ring: %zu)",
           count, (unsigned long long)payload, 2 * (c.nranks - 1) * count * esz / c.nranks);
  return ternSuccess;
}

}  // namespace tern
