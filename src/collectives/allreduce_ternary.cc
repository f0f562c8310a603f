// Ternary-compressed ring allreduce (TernGrad-style), see docs/DESIGN.md, "Ternary allreduce".
//
//   1. scales: per block of B elements, max |g| made global by a small dense
//      allreduce-max (exact, order-independent); optionally clipped at
//      clip * sigma, sigma from a dense allreduce-sum of g^2.
//   2. reduce-scatter in 32-element groups of bit planes: a chunk holding the
//      sum of k ranks travels at w(k) = floor(log2 k) + 2 bits; every hop
//      decodes, adds its own code (computed on the fly from g, never stored)
//      and re-encodes at w(k + 1) in one pass (TernaryKernels::addEncode).
//      With error feedback that pass codes g + residual and leaves the new
//      residual: each rank encodes each chunk exactly once a call.
//   3. allgather of the w(N)-bit sums, each hop forwarding the chunk and
//      decoding it (x scale, / N for ternAvg) into recvbuff on the way.
//
// Chunks go in framed codec steps (engine/program.h): the receiver checks width
// and group count in each header before touching the payload.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>

#include "codec/ternary_cpu.h"
#include "collectives/collectives.h"
#include "collectives/ternary.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"

namespace tern {

TernaryState& ternaryState(Attachments& owner, const ternTernaryConfig_t& initial) {
  return owner.getOrMake<TernaryState>([&] {
    auto st = std::make_shared<TernaryState>();
    st->cfg = initial;
    return st;
  });
}

namespace {

// One codec for every ternary step; what it does is set by its flags.  It
// runs through the operation's MemOps: the CPU codec for host buffers, the
// codec's kernels on the operation's stream for device buffers (so only
// codes cross PCIe and the wire).
class TernaryCodec : public GroupCodec {
 public:
  TernaryCodec(const MemOps& k, const TernaryInput& in, size_t g0, int win, int wout,
               bool addCode, void* decodeTo, ternDataType_t dt, int avgN)
      : in_(in), k_(k), g0_(g0), win_(win), wout_(wout), add_(addCode),
        dst_(decodeTo), dt_(dt), avgN_(avgN) {}

  void run(const char* in, char* out, size_t first, size_t n) const override {
    size_t q = g0_ + first;
    auto* o = reinterpret_cast<uint32_t*>(out);
    auto* i = reinterpret_cast<const uint32_t*>(in);
    const uint32_t* planes = i;
    int w = win_;
    if (add_) {  // this rank's codes join the sum
      if (i) k_.ternaryAddEncode(in_, q, n, i, win_, o, wout_);
      else k_.ternaryEncode(in_, q, n, o);
      planes = o;
      w = wout_;
    } else if (o) {  // allgather: pass the finished sum on
      k_.copy(o, i, n * 4 * win_);
    }
    if (dst_) k_.ternaryDecode(planes, w, q, n, in_.scales, in_.block, in_.count, dt_, avgN_, dst_);
  }

 private:
  TernaryInput in_;
  const MemOps& k_;
  size_t g0_;
  int win_, wout_;
  bool add_;
  void* dst_;
  ternDataType_t dt_;
  int avgN_;
};

// The ring: reduce-scatter with growing widths, then allgather with decode.
void planTernaryRing(const PlanCtx& x, const TernaryInput& in, void* dst, ternDataType_t dt,
                     int avgN, std::vector<std::unique_ptr<TernaryCodec>>& codecs, Phase* ph,
                     uint64_t* payload) {
  const int n = x.nranks, r = x.pos();  // chunks go by ring position
  const size_t groups = (in.count + kTernaryGroup - 1) / kTernaryGroup;
  const size_t maxCg = std::max<size_t>(2, x.cfg->chunkBytes / 16 / 2 * 2);
  const int wN = ternaryWidth(n);
  Conn* prev = x.prev();
  Conn* next = x.next();
  codecs.clear();
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  auto step = [&](Conn* from, Conn* to, size_t g0, size_t len, int win, int wout, bool code,
                  bool decode) {
    Step s;
    if (len == 0) return s;
    codecs.push_back(std::make_unique<TernaryCodec>(*x.mem, in, g0, win, wout, code,
                                                    decode ? dst : nullptr, dt, avgN));
    s.in = from;
    s.out = to;
    s.bytes = len;
    s.codec = codecs.back().get();
    s.inUnit = 4 * win;
    s.outUnit = 4 * (code ? wout : win);
    if (to) *payload += len * s.outUnit;
    return s;
  };
  auto add = [&](Conn* from, Conn* to, size_t g0, size_t len, int win, int wout, bool code,
                 bool decode) { prog.add(step(from, to, g0, len, win, wout, code, decode)); };
  // A piece's last step only receives and the next piece's first only
  // sends: the next piece's send goes ahead of it (as in allreduce_ring.cc).
  Step last;
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
    prog.add(last);
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
    last = step(prev, nullptr, g0, len, wN, wN, false, true);
    base += piece;
  }
  prog.add(last);
  ph->what = "ternary allreduce";
}

// The call's residual in the operation's memory, made (zero) when the
// tensor has none of this size and type yet.  nullptr: no memory for it.
float* residualFor(const MemOps& mem, TernaryResidual& r, size_t count) {
  if (!r.data || r.count != count || r.type != mem.type()) {
    r.data = mem.persistentZeros(count);
    r.count = r.data ? count : 0;
    r.type = mem.type();
  }
  return r.data.get();
}

// Bytes this rank has put on the wire towards its peers at the operation's
// level (the level's collectives run one at a time, so these are its own).
uint64_t bytesSentAtLevel(const PlanCtx& x) {
  uint64_t sent = 0;
  for (int p = 0; p < x.nranks; ++p)
    if (p != x.rank) sent += x.conn(p)->bytesSent.load(std::memory_order_relaxed);
  return sent;
}

// The ternary allreduce as phases: block maxima made global (allreduce-max),
// optionally the block sums of squares for clipping (allreduce-sum), then the
// ring with growing widths; local work between them.
class TernaryTask : public Task {
 public:
  TernaryTask(TernaryState& st, const TernaryCall& call) : st_(st), c_(call) {}

  ternResult_t next(const PlanCtx& x, Phase* ph, bool* more) override {
    *more = true;
    switch (stage_++) {
      case 0: return scales(x, ph);
      case 1:
        if (clip()) planAllReduce(x, sumSq_.data(), sumSq_.data(), nb_, ternFloat32, ternSum, ph);
        return ternSuccess;
      case 2: return ring(x, ph);
      default: finish(x);
    }
    *more = false;
    return ternSuccess;
  }

 private:
  bool clip() const { return c_.cfg.clip > 0; }

  // Global per-block scales, identical on every rank.
  ternResult_t scales(const PlanCtx& x, Phase* ph) {
    const uint32_t B = static_cast<uint32_t>(c_.cfg.blockSize);
    nb_ = (c_.count + B - 1) / B;
    maxAbs_.resize(nb_);
    if (clip()) sumSq_.resize(nb_);
    sentBefore_ = bytesSentAtLevel(x);
    x.mem->ternaryBlockStats(c_.src, c_.dt, c_.count, B, maxAbs_.data(),
                              clip() ? sumSq_.data() : nullptr);
    planAllReduce(x, maxAbs_.data(), maxAbs_.data(), nb_, ternFloat32, ternMax, ph);
    return ternSuccess;
  }

  ternResult_t ring(const PlanCtx& x, Phase* ph) {
    const uint32_t B = static_cast<uint32_t>(c_.cfg.blockSize);
    if (clip())
      for (size_t b = 0; b < nb_; ++b) {
        size_t len = std::min<size_t>(B, c_.count - b * B);
        float sigma = std::sqrt(sumSq_[b] / (static_cast<float>(x.nranks) * len));
        maxAbs_[b] = std::min(maxAbs_[b], c_.cfg.clip * sigma);
      }
    // Scales always come from the raw gradient.  With error feedback the
    // codes are drawn for g + residual, which clips against that scale; the
    // residual then stays below the scale in magnitude (scales taken from
    // g + residual would grow without bound).
    in_ = TernaryInput{c_.src, c_.dt, c_.count, maxAbs_.data(), B,
                       ternaryKey(c_.cfg.seed, static_cast<uint32_t>(x.rank), c_.index)};
    if (c_.residual) {
      in_.residual = residualFor(*x.mem, *c_.residual, c_.count);
      if (!in_.residual)
        return setError(ternSystemError,
                        "ternary allreduce: no " + std::string(memTypeName(x.mem->type())) +
                            " memory for the error feedback residual of " +
                            std::to_string(c_.count) + " floats");
    }
    planTernaryRing(x, in_, c_.dst, c_.dt, c_.op == ternAvg ? x.nranks : 0, codecs_, ph, &payload_);
    return ternSuccess;
  }

  void finish(const PlanCtx& x) {
    const size_t dense = 2 * (x.nranks - 1) * c_.count * ternTypeSize(c_.dt) / x.nranks;
    st_.record(c_.count, payload_, bytesSentAtLevel(x) - sentBefore_, dense);
    TERN_LOG(Trace, "ternary allreduce %zu elements: %llu payload bytes sent (dense ring: %zu)",
             c_.count, (unsigned long long)payload_, dense);
  }

  TernaryState& st_;
  TernaryCall c_;
  int stage_ = 0;
  size_t nb_ = 0;
  std::vector<float> maxAbs_, sumSq_;
  TernaryInput in_{};
  std::vector<std::unique_ptr<TernaryCodec>> codecs_;
  uint64_t payload_ = 0, sentBefore_ = 0;
};

}  // namespace

// Called at issue, in issue order: the Philox call index and the options
// are fixed here, so they agree across ranks whatever runs concurrently.
std::unique_ptr<Task> makeTernaryTask(TernaryState& st, const CollArgs& a, const void* handle,
                                      int nranks, int level) {
  std::lock_guard<std::mutex> lk(st.mu);
  const size_t esz = ternTypeSize(a.dt);
  const char* why = nranks == 1 ? "a single rank"
                    : a.count * esz < st.cfg.minBytes ? "below TERN_TERNARY_MIN_BYTES"
                    : ternaryWidth(nranks) > kTernaryMaxWidth ? "more than 511 ranks"
                                                              : nullptr;
  ++st.stats.calls;
  if (why) {
    ++st.stats.fallbacks;
    TERN_LOG(Info, "ternary allreduce of %zu bytes on %d ranks runs dense (%s)", a.count * esz,
             nranks, why);
    CollArgs dense = a;
    dense.kind = OpKind::AllReduce;
    return makeTask(dense);
  }
  TernaryCall call;
  call.src = a.src;
  call.dst = a.dst;
  call.count = a.count;
  call.dt = a.dt;
  call.op = a.op;
  call.cfg = st.cfg;
  // Levels count their calls separately (they are matched separately); the
  // default level keeps the plain 0, 1, 2, ... sequence.
  uint64_t n = st.callsAtLevel[level]++;
  call.index = level == TERN_PRIORITY_DEFAULT ? n : (static_cast<uint64_t>(level + 1) << 48) | n;
  if (st.cfg.errorFeedback) {
    auto& slot = st.residuals[handle ? handle : a.src];
    if (!slot) slot = std::make_shared<TernaryResidual>();
    call.residual = slot;
  }
  return std::make_unique<TernaryTask>(st, call);
}

void TernaryState::record(size_t elements, uint64_t payload, uint64_t wire, uint64_t dense) {
  std::lock_guard<std::mutex> lk(mu);
  stats.elements += elements;
  stats.payloadBytes += payload;
  stats.wireBytes += wire;
  stats.denseBytes += dense;
}

}  // namespace tern
