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
#include "collectives/ring.h"
#include "collectives/ternary.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "model/collective_model.h"
#include "topology/hosts.h"

namespace tern {

TernaryState& ternaryState(Attachments& owner, const ternTernaryConfig_t& initial) {
  return owner.getOrMake<TernaryState>([&] {
    auto st = std::make_shared<TernaryState>();
    st->cfg = initial;
    return st;
  });
}

namespace {

// The scales' reduction (a float max per block), beside a phase that sums.
constexpr Reduction kScalesMax{ternFloat32, ternMax};

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

// The ring over `ring`'s members: reduce-scatter with growing widths, then
// allgather with decode, of the 32-element groups [g.at, g.at + g.n) (every
// group of the call in the flat form; one host slice's across hosts in the
// two-level one, whose sums have one summand per host).
void planTernaryRing(const PlanCtx& x, const RingSpan& ring, Span g, const TernaryInput& in, void* dst,
                     ternDataType_t dt, int avgN, std::vector<std::unique_ptr<TernaryCodec>>& codecs,
                     Program& prog, uint64_t* payload) {
  const int n = ring.n, r = ring.pos;  // chunks go by ring position
  const size_t groups = g.at + g.n;
  const size_t maxCg = std::max<size_t>(2, x.cfg->chunkBytes / 16 / 2 * 2);
  const int wN = ternaryWidth(n);
  Conn* prev = ring.in;
  Conn* next = ring.out;
  codecs.clear();
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
  for (size_t base = g.at; base < groups;) {
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
    if (Conn* c = x.conns->ifMade(p); c && p != x.rank) sent += c->bytesSent.load(std::memory_order_relaxed);
  return sent;
}

// The ternary allreduce as phases: block maxima made global (allreduce-max),
// optionally the block sums of squares for clipping (allreduce-sum), then the
// ring with growing widths; local work between them.
//
// Two-level (several hosts of as many ranks each, no clipping:
// chooseTernaryTwoLevel in algo_choice.cc): rank j of a host codes slice j
// of the buffer.  Per slice: the host's sum first, densely over shm (a
// reduce-scatter into the result buffer), then the scales of the host sums
// along the rail of slice j (rank j of every host), then the ternary ring of
// slice j along that rail, whose sums have H summands, not N: codes of w(H)
// bits where the flat ring's grow to w(N); last the slices to every rank of
// the host (an allgather over shm).  The host sum is what is coded, so the
// result is unbiased as the flat form's; error feedback keeps each rank's
// residual of the slice it codes.
//
// The stages overlap: every slice is cut in P pieces (whole scale blocks),
// and phase t runs two programs side by side, on streams of their own: over
// shm the host sums of piece t and the allgather of piece t - 2; along the
// rail the scales and the ternary ring of piece t - 1 (its host sums done in
// phase t - 1).  So the shm passes run while the network carries codes, not
// before and after it.  Each element is still coded by the same rank, with
// the same draw, scale and residual: the result does not depend on P.
class TernaryTask : public Task {
 public:
  TernaryTask(TernaryState& st, const TernaryCall& call) : st_(st), c_(call) {}

  ternResult_t next(const PlanCtx& x, Phase* ph, bool* more) override {
    *more = true;
    if (stage_ == 0 && !dense_) {  // the first phase (a dense task keeps stage_ at 0)
      twoLevel_ = chooseTernaryTwoLevel(algoFacts(x, OpKind::Ternary, c_.count * esz()), clip());
      sentBefore_ = bytesSentAtLevel(x);
      if (tooWide(x)) dense_ = makeTask(collArgs(OpKind::AllReduce, c_.src, c_.dst, c_.count, c_.dt, c_.op));
    }
    if (dense_) return dense_->next(x, ph, more);
    if (twoLevel_) {
      if (stage_ == 0) TERN_CHECK(cutPieces(x));
      if (stage_ < pieces_ + 2) return overlapped(x, stage_++, ph);
      finish(x);
    } else {
      switch (stage_++) {
        case 0: return scales(x, ph);
        case 1:
          if (clip()) planAllReduce(x, sumSq_.data(), sumSq_.data(), nb_, ternFloat32, ternSum, ph);
          return ternSuccess;
        case 2: return ring(x, ph);
        default: finish(x);
      }
    }
    *more = false;
    return ternSuccess;
  }

 private:
  bool clip() const { return c_.cfg.clip > 0; }
  // A sum of more summands than the codec's widest code holds (511: ranks
  // flat, hosts in two levels) runs dense, counted as a fallback.  Decided
  // here, not at issue: the host layout says how many summands there are.
  bool tooWide(const PlanCtx& x) {
    const int summands = twoLevel_ ? x.hosts->hosts() : x.nranks;
    if (ternaryWidth(summands) <= kTernaryMaxWidth) return false;
    st_.countFallback();
    TERN_LOG(Info, "ternary allreduce of %zu bytes runs dense: %d %s need %d-bit codes (the codec's widest: %d)",
             c_.count * esz(), summands, twoLevel_ ? "hosts" : "ranks", ternaryWidth(summands), kTernaryMaxWidth);
    return true;
  }
  size_t esz() const { return ternTypeSize(c_.dt); }
  uint32_t block() const { return static_cast<uint32_t>(c_.cfg.blockSize); }

  // Two-level: the host's slices, each cut in pieces_ pieces; the rings over
  // the host's ranks and along this rank's rail; the error feedback residual.
  ternResult_t cutPieces(const PlanCtx& x) {
    const HostLayout& hl = *x.hosts;
    const int host = hl.hostOf[x.rank];
    me_ = hl.localRank[x.rank];
    // Slices of whole scale blocks (B, a multiple of the codec's 64-element
    // super-group): a rank's block maxima and code groups are its own.
    slices_ = spansOf(sliceCuts(c_.count, static_cast<int>(hl.members[host].size()), block()));
    // (The same on every rank: the slices and the chunk size are.)
    pieces_ = model::overlapPieces(static_cast<double>(slices_[0].n * esz()), static_cast<double>(x.cfg->chunkBytes));
    TERN_LOG(Trace, "ternary allreduce (two-level) of %zu elements: slices of up to %zu, %d pieces each", c_.count,
             slices_[0].n, pieces_);
    local_ = ringOf(x, hl.members[host], me_);
    std::vector<int> rail(hl.hosts());
    for (int h = 0; h < hl.hosts(); ++h) rail[h] = hl.members[h][me_];
    rail_ = ringOf(x, rail, host);
    nb_ = (c_.count + block() - 1) / block();
    maxAbs_.assign(nb_, 0.0f);
    return input(x, c_.dst);
  }

  // Piece k of every slice of the host (blocks[j]: local rank j's).
  std::vector<Span> piece(int k) const {
    std::vector<Span> p(slices_.size());
    for (size_t j = 0; j < slices_.size(); ++j) p[j] = pieceOf(slices_[j], k, pieces_, block());
    return p;
  }

  // Two-level phase t: over shm the host sums of piece t, then the
  // allgather of piece t - 2; along the rail the scales and the ternary ring
  // of piece t - 1 (see above).
  ternResult_t overlapped(const PlanCtx& x, int t, Phase* ph) {
    ph->progs.resize(2);
    Program& shm = ph->progs[0];
    Program& rail = ph->progs[1];
    ph->red = {c_.dt, ternSum};
    ph->what = "ternary allreduce (two-level)";
    char* d = static_cast<char*>(c_.dst);
    if (t < pieces_) {
      ringReduceScatterSteps(shm, local_, piece(t).data(), static_cast<const char*>(c_.src), d, esz(),
                             x.cfg->chunkBytes, false);
    }
    if (t >= 2) ringAllGatherSteps(shm, local_, piece(t - 2).data(), nullptr, d, esz(), x.cfg->chunkBytes);
    if (t >= 1 && t <= pieces_) railSteps(x, piece(t - 1)[me_], rail);
    return ternSuccess;
  }

  // The flat form's per-block scales: of the input, made global.
  ternResult_t scales(const PlanCtx& x, Phase* ph) {
    const uint32_t B = block();
    nb_ = (c_.count + B - 1) / B;
    maxAbs_.assign(nb_, 0.0f);
    if (clip()) sumSq_.resize(nb_);
    x.mem->ternaryBlockStats(c_.src, c_.dt, c_.count, B, maxAbs_.data(), clip() ? sumSq_.data() : nullptr);
    planAllReduce(x, maxAbs_.data(), maxAbs_.data(), nb_, ternFloat32, ternMax, ph);
    return ternSuccess;
  }

  // What the codec reads: the input (flat) or the host sums (two-level),
  // with this rank's Philox stream and, with error feedback, its residual.
  ternResult_t input(const PlanCtx& x, const void* coded) {
    in_ = TernaryInput{coded, c_.dt, c_.count, maxAbs_.data(), block(),
                       ternaryKey(c_.cfg.seed, static_cast<uint32_t>(x.rank), c_.index)};
    if (!c_.residual) return ternSuccess;
    in_.residual = residualFor(*x.mem, *c_.residual, c_.count);
    if (in_.residual) return ternSuccess;
    return setError(ternSystemError, "ternary allreduce: no " + std::string(memTypeName(x.mem->type())) +
                                         " memory for the error feedback residual of " +
                                         std::to_string(c_.count) + " floats");
  }

  ternResult_t ring(const PlanCtx& x, Phase* ph) {
    const uint32_t B = block();
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
    TERN_CHECK(input(x, c_.src));
    ph->progs.resize(1);
    const Span all{0, (c_.count + kTernaryGroup - 1) / kTernaryGroup};
    planTernaryRing(x, RingSpan{x.nranks, x.pos(), x.prev(), x.next()}, all, in_, c_.dst, c_.dt,
                    c_.op == ternAvg ? x.nranks : 0, codecs_, ph->progs[0], &payload_);
    ph->what = "ternary allreduce";
    return ternSuccess;
  }

  // Two-level, along the rail: the scales of this rank's piece `mine` of
  // its host sums, made the rail's (only the piece's coders and decoders
  // need them), then the piece's ternary ring across hosts, decoded into the
  // result buffer over its host sums.  (Every host's rank j has the same
  // piece, empty alike.)
  void railSteps(const PlanCtx& x, const Span& mine, Program& rail) {
    if (mine.n == 0) return;
    const uint32_t B = block();
    rail.red = &kScalesMax;
    float* m = maxAbs_.data() + mine.at / B;
    x.mem->ternaryBlockStats(static_cast<const char*>(c_.dst) + mine.at * esz(), c_.dt, mine.n, B, m, nullptr);
    ringAllReduceSteps(rail, rail_, reinterpret_cast<const char*>(m), reinterpret_cast<char*>(m),
                       (mine.n + B - 1) / B, sizeof(float), x.cfg->chunkBytes, false);
    const size_t g0 = mine.at / kTernaryGroup, g1 = (mine.at + mine.n + kTernaryGroup - 1) / kTernaryGroup;
    planTernaryRing(x, rail_, Span{g0, g1 - g0}, in_, c_.dst, c_.dt, c_.op == ternAvg ? x.nranks : 0, codecs_, rail,
                    &payload_);
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
  bool twoLevel_ = false;
  std::unique_ptr<Task> dense_;  // a sum too wide for the codec: the dense allreduce's task
  int me_ = 0;               // two-level: this rank's index on its host (its slice)
  int pieces_ = 1;           // two-level: pieces per slice
  std::vector<Span> slices_;  // two-level: the host's slices
  RingSpan local_, rail_;    // two-level: the host's ranks; rank j of every host
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
  // (Too many summands for the codec is found when the task plans: the
  // host layout decides it.)
  const char* why = nranks == 1                       ? "a single rank"
                    : a.count * esz < st.cfg.minBytes ? "below TERN_TERNARY_MIN_BYTES"
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

void TernaryState::countFallback() {
  std::lock_guard<std::mutex> lk(mu);
  ++stats.fallbacks;
}

void TernaryState::record(size_t elements, uint64_t payload, uint64_t wire, uint64_t dense) {
  std::lock_guard<std::mutex> lk(mu);
  stats.elements += elements;
  stats.payloadBytes += payload;
  stats.wireBytes += wire;
  stats.denseBytes += dense;
}

}  // namespace tern
