#include "model/collective_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>
#include <utility>

namespace tern::model {

namespace {

const char* const kLinkNames[] = {"shm", "tcp", "ucx"};
const char* const kAlgoNames[] = {"small", "rd", "ring", "twolevel", "ternary", "ternary-twolevel"};
const char* const kTermNames[] = {"latency_us", "small_latency_us", "ns_per_byte", "ns_per_reduced_byte"};
enum Term { kLatency, kSmallLatency, kPerByte, kPerReduced };
constexpr int kCodec = kLinks * kTermsPerLink;

int param(Link l, int term) { return static_cast<int>(l) * kTermsPerLink + term; }

// What one link class carries in a step: bytes through its endpoint, bytes
// reduced.  A codec leg is the CPU's share of a ternary step instead: `bytes`
// of the caller's data coded (its link means nothing).
struct Leg {
  Link link;
  double bytes, reduced;
  bool codec = false;
};

// A decode alone runs ~3.8x as fast as a decode-add-encode pass (7 against
// 1.9 GB/s of float32, perf/RESULTS.md, 2026-11-27: ternary error feedback
// fused into the encode pass), so an allgather hop costs this share of a
// reduce-scatter hop's codec time.
constexpr double kDecodeShare = 0.26;

// A prediction being summed: the coefficient of every parameter, so that the
// time is their dot product with the parameters (what the fit solves for).
class Cost {
 public:
  explicit Cost(const Model& m) : p_(paramsOf(m)) {}

  double legTime(const Leg& g, bool small) const {
    if (g.codec) return g.bytes * p_[kCodec] / 1e3;
    return p_[param(g.link, small ? kSmallLatency : kLatency)] + g.bytes * p_[param(g.link, kPerByte)] / 1e3 +
           g.reduced * p_[param(g.link, kPerReduced)] / 1e3;
  }
  // `times` alike steps whose legs run at once: each step lasts as long as
  // its slowest leg (the others wait for it in a pipelined ring: a chunk is
  // coded while the one before it is on the wire).
  void steps(double times, const std::vector<Leg>& legs, bool small = false) {
    if (times <= 0 || legs.empty()) return;
    const Leg* slow = &legs[0];
    for (const Leg& g : legs)
      if (legTime(g, small) > legTime(*slow, small)) slow = &g;
    if (slow->codec) {
      c_[kCodec] += times * slow->bytes / 1e3;
      return;
    }
    c_[param(slow->link, small ? kSmallLatency : kLatency)] += times;
    c_[param(slow->link, kPerByte)] += times * slow->bytes / 1e3;
    c_[param(slow->link, kPerReduced)] += times * slow->reduced / 1e3;
  }
  void add(const Params& other, double times = 1) {
    for (int i = 0; i < kParams; ++i) c_[i] += times * other[i];
  }
  double time() const { return std::inner_product(c_.begin(), c_.end(), p_.begin(), 0.0); }
  const Params& coeff() const { return c_; }

 private:
  Params p_, c_{};
};

// The classes a step of a flat schedule over every rank uses: the network
// when there are several hosts, shm when some host has several ranks.
std::vector<Leg> flatLegs(const Call& call, double bytes, double reduced) {
  std::vector<Leg> legs;
  const Layout& lay = call.layout;
  if (lay.hosts() > 1) legs.push_back({call.net, bytes, reduced});
  if (*std::max_element(lay.ranksPerHost.begin(), lay.ranksPerHost.end()) > 1) legs.push_back({Link::Shm, bytes, reduced});
  return legs;
}

// The flat ring (collectives/allreduce_ring.cc): N-1 reduce-scatter steps
// then N-1 allgather steps, each moving 1/N of the buffer per rank.  Ranks
// are ordered by host, so a host's NIC carries one rank's chunk per step.
// Pieces of N chunks pipeline into each other: the latency is paid per step
// of the schedule, not per piece.
void ring(Cost& c, const Call& call, double S) {
  const int N = call.layout.ranks();
  c.steps(N - 1, flatLegs(call, S / N, S / N));
  c.steps(N - 1, flatLegs(call, S / N, 0));
}

// Recursive doubling (collectives.h, recursiveDoublingSteps): ranks past the
// largest power of two p fold into a partner first and get the result last;
// log2 p exchanges of the whole buffer in between.  Ranks are numbered host
// by host.  In a round every rank whose partner is on another host sends the
// whole buffer through its host's NIC, so the NIC carries it once per such
// rank; pairs inside a host copy it over shm at the same time.
void recursiveDoubling(Cost& c, const Call& call, double S, bool small) {
  const Layout& lay = call.layout;
  const int N = lay.ranks();
  std::vector<int> hostOf;
  for (int h = 0; h < lay.hosts(); ++h) hostOf.insert(hostOf.end(), lay.ranksPerHost[h], h);
  int p = 1;
  while (p * 2 <= N) p *= 2;
  const int rem = N - p;
  std::vector<int> crossing(lay.hosts());
  // One round of the pairs pairOf(0..pairs-1), each (sender, partner).
  auto round = [&](int pairs, auto pairOf, double reduced) {
    std::fill(crossing.begin(), crossing.end(), 0);
    bool inside = false;
    for (int i = 0; i < pairs; ++i) {
      const auto [a, b] = pairOf(i);
      if (hostOf[a] == hostOf[b]) inside = true;
      else ++crossing[hostOf[a]];
    }
    const int most = *std::max_element(crossing.begin(), crossing.end());
    std::vector<Leg> legs;
    if (most > 0) legs.push_back({call.net, S * most, reduced});
    if (inside) legs.push_back({Link::Shm, S, reduced});
    c.steps(1, legs, small);
  };
  if (rem > 0) {
    auto fold = [](int i) { return std::pair<int, int>{2 * i, 2 * i + 1}; };
    round(rem, fold, S);  // fold in
    round(rem, fold, 0);  // result back out
  }
  auto real = [&](int nr) { return nr < rem ? nr * 2 + 1 : nr + rem; };
  for (int mask = 1; mask < p; mask <<= 1)
    round(p, [&](int nr) { return std::pair<int, int>{real(nr), real(nr ^ mask)}; }, S);
}

// A ring inside every host at once, over shm (two-level's first and last
// stage): L-1 steps of S/L bytes on a host of L ranks.  The slowest host
// holds up the stage after it.
void insideHosts(Cost& c, const Layout& lay, double S, bool reduce) {
  double worst = -1;
  int worstL = 1;
  for (int L : std::set<int>(lay.ranksPerHost.begin(), lay.ranksPerHost.end())) {
    if (L < 2) continue;
    const double t = (L - 1) * c.legTime({Link::Shm, S / L, reduce ? S / L : 0}, false);
    if (t > worst) worst = t, worstL = L;
  }
  if (worstL > 1) c.steps(worstL - 1, {{Link::Shm, S / worstL, reduce ? S / worstL : 0}});
}

// The most segments a rank allreduces across hosts in two-level
// (allreduce_twolevel.cc): every host cuts the buffer in as many slices as
// it has ranks, the cuts of all hosts make segments, and each segment is one
// ring among its owners.  Even hosts: 1.
int segmentsPerRank(const Layout& lay) {
  const std::set<int> sizes(lay.ranksPerHost.begin(), lay.ranksPerHost.end());
  using Fraction = std::pair<long long, long long>;  // k/q in lowest terms
  auto less = [](const Fraction& a, const Fraction& b) { return a.first * b.second < b.first * a.second; };
  std::vector<Fraction> cuts;  // every host's cuts k/M, 0 < k < M, once each, in order
  for (int M : sizes)
    for (int k = 1; k < M; ++k) {
      const int g = std::gcd(k, M);
      cuts.push_back({k / g, M / g});
    }
  std::sort(cuts.begin(), cuts.end(), less);
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  int most = 1;
  for (int M : sizes)
    for (int j = 0; j < M; ++j) {  // cuts strictly inside (j/M, (j+1)/M)
      const auto lo = std::upper_bound(cuts.begin(), cuts.end(), Fraction{j, M}, less);
      const auto hi = std::lower_bound(cuts.begin(), cuts.end(), Fraction{j + 1, M}, less);
      most = std::max(most, static_cast<int>(hi - lo) + 1);
    }
  return most;
}

// The fastest dense algorithm through the engine (the ternary allreduce's
// scales are such a call: planAllReduce inside its task).
Prediction fastestDense(const Call& call, const Model& m) {
  Prediction best;
  best.timeUs = -1;
  for (Algo a : {Algo::RecursiveDoubling, Algo::Ring, Algo::TwoLevel}) {
    Prediction p = predict(a, call, m);
    if (p.applies && (best.timeUs < 0 || p.timeUs < best.timeUs)) best = p;
  }
  return best;
}

// Ternary ring steps over `k` summands (allreduce_ternary.cc): send s of the
// reduce-scatter carries a chunk summed over s ranks at ternaryWidth(s) bits,
// the k-1 allgather sends carry the full sums at ternaryWidth(k).  Sends of
// one width are alike, so they are summed a width at a time.  `elements`:
// the elements one step moves through the costed endpoint; `coded`: the
// bytes of the caller's data a rank's reduce-scatter hop decodes, adds and
// encodes (an allgather hop only decodes them).
template <typename Legs>
void ternarySteps(Cost& c, int k, double elements, double coded, Legs legsFor) {
  auto legs = [&](int w, double codec) {
    std::vector<Leg> l = legsFor(elements * w / 8);
    l.push_back({Link::Shm, codec, 0, true});
    return l;
  };
  for (int s = 1; s <= k - 1;) {
    const int w = ternaryWidth(s);
    const int last = std::min<long long>(k - 1, (1LL << (w - 1)) - 1);
    c.steps(last - s + 1, legs(w, coded));
    s = last + 1;
  }
  c.steps(k - 1, legs(ternaryWidth(k), coded * kDecodeShare));
}

}  // namespace

const char* linkName(Link l) { return kLinkNames[static_cast<int>(l)]; }
const char* algoName(Algo a) { return kAlgoNames[static_cast<int>(a)]; }

bool parseLink(const std::string& name, Link* out) {
  for (int i = 0; i < kLinks; ++i)
    if (name == kLinkNames[i]) return *out = static_cast<Link>(i), true;
  return false;
}

bool parseAlgo(const std::string& name, Algo* out) {
  for (int i = 0; i < kAlgos; ++i)
    if (name == kAlgoNames[i]) return *out = static_cast<Algo>(i), true;
  return false;
}

Model defaultModel() {
  Model m;
  // shm, 2 ranks on this 2-vCPU VM.  Small path: the 8-byte allreduce's
  // 0.41 us (perf/RESULTS.md, 2026-11-28: the small path, small blocking
  // collectives without engine rounds), one exchange.  Through the engine:
  // ~1 us a step (the same section's 0.82 us before the small path, plus a
  // chunk's hand-off).  Bytes: the 64 MiB ring's busbw 10.45 GB/s (2026-11-25:
  // allreduce against the tuned peers on a quiet host) is 0.096 ns a byte
  // averaged over its copy and reduce steps: 0.07 to copy, 0.05 more to add.
  m.links[0] = {1.0, 0.41, 0.07, 0.05};
  // tcp at 1 Gbit/s between network namespaces: the flat ring moved 88% of
  // the wire's rate, 9.1 ns a byte (2026-12-04: two-level allreduce across
  // emulated hosts: 100.7 MB in 911 ms); 8-byte latency over tcp 10.5 us on
  // the small path (2026-11-27: fifo memory follows use); the engine's step
  // ~1.5 us more (not measured apart); the reduce as shm's.
  m.links[1] = {12.0, 10.5, 8.0 / kTcpWireShare, 0.05};
  // ucx: not measured on an RDMA NIC here (UCX over TCP lost to tern's tcp,
  // 2026-11-28): a nominal 100 Gbit/s NIC at 88% of its rate, 3 us a step.
  m.links[2] = {3.0, 3.0, 0.08 / kTcpWireShare, 0.05};
  // The codec on one AVX-512 core (2026-11-27: ternary error feedback fused
  // into the encode pass): decode-add-encode ~1.9 GB/s of float32 input.
  m.codecNsPerByte = 0.53;
  m.source = "defaults: this host's figures in perf/RESULTS.md (shm; tcp at 1 Gbit/s) and a nominal ucx";
  return m;
}

void setNetwork(Model& m, Link l, double gbps, double latencyUs) {
  LinkParams& p = m.links[static_cast<int>(l)];
  p.nsPerByte = 8.0 / gbps / kTcpWireShare;
  if (latencyUs >= 0) p.latencyUs = p.smallLatencyUs = latencyUs;
}

Params paramsOf(const Model& m) {
  Params p{};
  for (int l = 0; l < kLinks; ++l) {
    const LinkParams& q = m.links[l];
    p[l * kTermsPerLink + kLatency] = q.latencyUs;
    p[l * kTermsPerLink + kSmallLatency] = q.smallLatencyUs;
    p[l * kTermsPerLink + kPerByte] = q.nsPerByte;
    p[l * kTermsPerLink + kPerReduced] = q.nsPerReducedByte;
  }
  p[kCodec] = m.codecNsPerByte;
  return p;
}

void setParams(Model& m, const Params& p) {
  for (int l = 0; l < kLinks; ++l)
    m.links[l] = {p[l * kTermsPerLink + kLatency], p[l * kTermsPerLink + kSmallLatency],
                  p[l * kTermsPerLink + kPerByte], p[l * kTermsPerLink + kPerReduced]};
  m.codecNsPerByte = p[kCodec];
}

std::string paramName(int i) {
  if (i == kCodec) return "codec.ns_per_byte";
  return std::string(kLinkNames[i / kTermsPerLink]) + "." + kTermNames[i % kTermsPerLink];
}

int Layout::ranks() const { return std::accumulate(ranksPerHost.begin(), ranksPerHost.end(), 0); }
int Layout::minLocal() const { return *std::min_element(ranksPerHost.begin(), ranksPerHost.end()); }

Layout evenLayout(int hosts, int ranksPerHost) { return Layout{std::vector<int>(hosts, ranksPerHost)}; }

Layout spreadLayout(int ranks, int hosts) {
  Layout l;
  for (int h = 0; h < hosts; ++h) l.ranksPerHost.push_back(ranks / hosts + (h < ranks % hosts));
  return l;
}

int overlapPieces(double sliceBytes, double chunkBytes) {
  constexpr double kChunksPerPiece = 8, kMaxPieces = 8;
  return static_cast<int>(std::clamp(std::floor(sliceBytes / (kChunksPerPiece * chunkBytes)), 1.0, kMaxPieces));
}

int ternaryWidth(long long k) {
  int w = 2;
  while (k >>= 1) ++w;
  return w;
}

Prediction predict(Algo a, const Call& call, const Model& m) {
  const Layout& lay = call.layout;
  if (lay.ranksPerHost.empty() || lay.minLocal() < 1 || !(call.bytes >= 0) || call.dtypeBytes < 1 || call.blockSize < 1)
    throw std::invalid_argument("a call needs at least one host, a rank on every host, bytes >= 0 and a positive "
                                "element and block size.");
  Prediction out;
  out.algo = a;
  const int N = lay.ranks(), H = lay.hosts();
  const double S = call.bytes, count = S / call.dtypeBytes;
  Cost c(m);
  if (a == Algo::Ternary) out.bits = ternaryWidth(N);
  if (a == Algo::TernaryTwoLevel) out.bits = ternaryWidth(H);
  if (N == 1) {
    out.applies = !isTernary(a);
    if (!out.applies) out.why = "one rank: nothing to sum";
    return out;
  }
  if ((a == Algo::TwoLevel || a == Algo::TernaryTwoLevel) && H == 1) {
    out.applies = false;
    out.why = "one host: two-level would be the ring's steps";
    return out;
  }
  switch (a) {
    case Algo::Small: recursiveDoubling(c, call, S, true); break;
    case Algo::RecursiveDoubling: recursiveDoubling(c, call, S, false); break;
    case Algo::Ring: ring(c, call, S); break;
    case Algo::TwoLevel: {
      // 1. reduce-scatter in every host; 2. each rank's slice allreduced with
      // its owners on the other hosts: every host's NIC sends 2(H-1)/H of the
      // buffer in all (its rails share it), the busiest rank (on the smallest
      // host) adds (H-1)/H of its slice, and each of its segments is a ring of
      // 2(H-1) steps; 3. allgather in every host.  The stages run one after
      // the other, as the plan's one program runs them (perf/RESULTS.md,
      // 2026-12-04: two-level allreduce across emulated hosts).
      insideHosts(c, lay, S, true);
      const double slice = S / lay.minLocal();
      Params inter{};
      inter[param(call.net, kLatency)] = 2.0 * (H - 1) * segmentsPerRank(lay);
      inter[param(call.net, kPerByte)] = 2.0 * (H - 1) / H * S / 1e3;
      inter[param(call.net, kPerReduced)] = 1.0 * (H - 1) / H * slice / 1e3;
      c.add(inter);
      insideHosts(c, lay, S, false);
      break;
    }
    case Algo::Ternary: {
      // The scales (an allreduce-max of a float per block), then the ring at
      // growing widths over every rank, each hop coding a chunk of S/N.
      Call scales = call;
      scales.bytes = 4 * std::ceil(count / call.blockSize);
      c.add(fastestDense(scales, m).coeff);
      ternarySteps(c, N, count / N, S / N, [&](double bytes) { return flatLegs(call, bytes, 0); });
      break;
    }
    case Algo::TernaryTwoLevel: {
      // Over shm the host sums and the allgather; along the rails the
      // scales and the ternary ring on each rank's slice (widths grow with
      // H, not N: a host's rails together send 1/H of the buffer per step at
      // the step's width; the busiest rank codes 1/H of its slice per hop).
      // The plan overlaps the two sides in P pieces of every slice, so the
      // slower side runs whole and the shm side adds one piece's worth
      // (the first piece's host sums, the last one's allgather).
      Cost shm(m), rail(m);
      insideHosts(shm, lay, S, true);
      insideHosts(shm, lay, S, false);
      const double slice = count / lay.minLocal();
      Call scales = call;
      scales.layout = evenLayout(H, 1);
      scales.bytes = 4 * std::ceil(slice / call.blockSize);
      rail.add(fastestDense(scales, m).coeff);
      ternarySteps(rail, H, count / H, slice * call.dtypeBytes / H,
                   [&](double bytes) { return std::vector<Leg>{{call.net, bytes, 0}}; });
      c.add(rail.time() >= shm.time() ? rail.coeff() : shm.coeff());
      c.add(shm.coeff(), 1.0 / overlapPieces(slice * call.dtypeBytes, call.chunkBytes));
      break;
    }
  }
  out.coeff = c.coeff();
  out.timeUs = c.time();
  return out;
}

bool runnable(const Prediction& p, const Call& call, const Limits& lim, std::string* why) {
  std::string reason = p.why;
  if (!p.applies) {
  } else if (p.algo == Algo::Small && call.bytes > lim.smallBytes) {
    reason = "above TERN_SMALL_THRESHOLD";
  } else if (isTernary(p.algo) && call.bytes < lim.ternaryMinBytes) {
    reason = "below TERN_TERNARY_MIN_BYTES: runs dense";
  } else if (isTernary(p.algo) && p.bits > lim.maxWidth) {
    reason = std::to_string(p.bits) + " bits, the codec takes at most " + std::to_string(lim.maxWidth) +
             ": runs dense";
  } else {
    return true;
  }
  if (why) *why = reason;
  return false;
}

Choice choose(const Call& call, bool ternary, const Model& m, const Limits& lim) {
  Choice best;
  bool found = false;
  auto consider = [&](std::initializer_list<Algo> algos) {
    for (Algo a : algos) {
      const Prediction p = predict(a, call, m);
      if (runnable(p, call, lim) && (!found || p.timeUs < best.timeUs)) {
        best = {a, p.timeUs, p.bits};
        found = true;
      }
    }
  };
  if (ternary) consider({Algo::Ternary, Algo::TernaryTwoLevel});
  if (!found) consider({Algo::Small, Algo::RecursiveDoubling, Algo::Ring, Algo::TwoLevel});
  return best;
}

// ---- the fit ----------------------------------------------------------------

namespace {

using Matrix = std::vector<std::vector<double>>;  // rows

// min |A_P z - b| over the columns marked in `use` (Householder QR); the
// other entries of the result are 0.  A column that adds no rank gets 0.
std::vector<double> leastSquares(const Matrix& A, const std::vector<double>& b, const std::vector<bool>& use) {
  std::vector<int> cols;
  for (size_t j = 0; j < use.size(); ++j)
    if (use[j]) cols.push_back(static_cast<int>(j));
  const size_t m = A.size(), k = cols.size();
  Matrix R(m, std::vector<double>(k));
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < k; ++j) R[i][j] = A[i][cols[j]];
  std::vector<double> y = b;
  for (size_t j = 0; j < k && j < m; ++j) {
    double norm = 0;
    for (size_t i = j; i < m; ++i) norm += R[i][j] * R[i][j];
    norm = std::sqrt(norm);
    if (norm == 0) continue;
    const double alpha = R[j][j] > 0 ? -norm : norm;
    std::vector<double> v(m, 0);
    for (size_t i = j; i < m; ++i) v[i] = R[i][j];
    v[j] -= alpha;
    double vv = 0;
    for (size_t i = j; i < m; ++i) vv += v[i] * v[i];
    if (vv == 0) continue;
    auto reflect = [&](auto get) {
      double dot = 0;
      for (size_t i = j; i < m; ++i) dot += v[i] * get(i);
      return 2 * dot / vv;
    };
    for (size_t c = j; c < k; ++c) {
      const double f = reflect([&](size_t i) { return R[i][c]; });
      for (size_t i = j; i < m; ++i) R[i][c] -= f * v[i];
    }
    const double f = reflect([&](size_t i) { return y[i]; });
    for (size_t i = j; i < m; ++i) y[i] -= f * v[i];
  }
  std::vector<double> z(k, 0), x(use.size(), 0);
  for (size_t jj = std::min(k, m); jj-- > 0;) {
    double s = y[jj];
    for (size_t c = jj + 1; c < k; ++c) s -= R[jj][c] * z[c];
    z[jj] = std::fabs(R[jj][jj]) > 1e-12 ? s / R[jj][jj] : 0;
  }
  for (size_t j = 0; j < k; ++j) x[cols[j]] = z[j];
  return x;
}

// Lawson and Hanson's active-set method: min |Ax - b| with x >= 0.
std::vector<double> nonNegativeLeastSquares(const Matrix& A, const std::vector<double>& b) {
  const size_t n = A.empty() ? 0 : A[0].size();
  std::vector<double> x(n, 0);
  std::vector<bool> passive(n, false);
  auto gradient = [&] {
    std::vector<double> w(n, 0);
    for (size_t i = 0; i < A.size(); ++i) {
      double r = b[i];
      for (size_t j = 0; j < n; ++j) r -= A[i][j] * x[j];
      for (size_t j = 0; j < n; ++j) w[j] += A[i][j] * r;
    }
    return w;
  };
  for (size_t outer = 0; outer < 4 * n + 4; ++outer) {
    const std::vector<double> w = gradient();
    int t = -1;
    for (size_t j = 0; j < n; ++j)
      if (!passive[j] && w[j] > 1e-12 && (t < 0 || w[j] > w[t])) t = static_cast<int>(j);
    if (t < 0) break;
    passive[t] = true;
    for (size_t inner = 0; inner < 4 * n + 4; ++inner) {
      const std::vector<double> z = leastSquares(A, b, passive);
      double alpha = 1;
      for (size_t j = 0; j < n; ++j)
        if (passive[j] && z[j] <= 0) alpha = std::min(alpha, x[j] > z[j] ? x[j] / (x[j] - z[j]) : 0.0);
      for (size_t j = 0; j < n; ++j) x[j] += alpha * (z[j] - x[j]);
      if (alpha == 1) break;
      for (size_t j = 0; j < n; ++j)
        if (passive[j] && x[j] <= 1e-15) passive[j] = false, x[j] = 0;
    }
  }
  return x;
}

Call callOf(const Measurement& me) {
  Call c;
  c.bytes = me.bytes;
  c.layout = me.layout;
  c.dtypeBytes = me.dtypeBytes;
  c.net = me.link;
  return c;
}

}  // namespace

FitResult fit(const std::vector<Measurement>& ms, const Model& start) {
  for (size_t i = 0; i < ms.size(); ++i) {
    const Measurement& me = ms[i];
    const std::string at = "measurement " + std::to_string(i);
    if (me.layout.ranksPerHost.empty() || me.layout.minLocal() < 1)
      throw std::invalid_argument(at + " needs at least one host and a rank on every host.");
    if (!(me.timeUs > 0) || !(me.bytes > 0) || me.dtypeBytes < 1)
      throw std::invalid_argument(at + " needs a positive time, size and element size.");
    if (me.layout.hosts() > 1 && me.link == Link::Shm)
      throw std::invalid_argument(at + " spans " + std::to_string(me.layout.hosts()) +
                                  " hosts, so its link between them is tcp or ucx, not shm.");
  }
  if (ms.empty()) throw std::invalid_argument("the fit needs at least one measurement.");
  const Params prior = paramsOf(start);
  FitResult r;
  r.model = start;
  // A step costs its slowest class, so which terms a measurement's time is
  // made of depends on the parameters: solve with the slowest classes of the
  // current estimate, then again with the new estimate's, until they settle.
  for (r.iterations = 1; r.iterations <= 30; ++r.iterations) {
    Matrix A;
    for (const Measurement& me : ms) {
      Params a = predict(me.algo, callOf(me), r.model).coeff;
      std::vector<double> row(kParams);
      for (int j = 0; j < kParams; ++j) row[j] = a[j] / me.timeUs;  // relative errors: µs and seconds alike
      A.push_back(row);
    }
    std::vector<double> scale(kParams, 0);
    for (int j = 0; j < kParams; ++j) {
      for (const auto& row : A) scale[j] += row[j] * row[j];
      scale[j] = std::sqrt(scale[j]);
      r.fitted[j] = scale[j] > 0;
    }
    // Columns scaled to unit length; rows of a weak pull (1e-3) towards the
    // start keep terms the measurements cannot tell apart (a ring's bytes and
    // reduced bytes are always 2:1) near it instead of anywhere on a line.
    Matrix S;
    std::vector<double> b;
    std::vector<int> cols;
    for (int j = 0; j < kParams; ++j)
      if (r.fitted[j]) cols.push_back(j);
    for (const auto& row : A) {
      std::vector<double> s;
      for (int j : cols) s.push_back(row[j] / scale[j]);
      S.push_back(s);
      b.push_back(1);
    }
    constexpr double kPull = 1e-3;
    for (size_t k = 0; k < cols.size(); ++k) {
      std::vector<double> s(cols.size(), 0);
      s[k] = kPull;
      S.push_back(s);
      b.push_back(kPull * prior[cols[k]] * scale[cols[k]]);
    }
    const std::vector<double> z = nonNegativeLeastSquares(S, b);
    Params next = paramsOf(r.model);
    double change = 0;
    for (size_t k = 0; k < cols.size(); ++k) {
      const double v = z[k] / scale[cols[k]];
      change = std::max(change, std::fabs(v - next[cols[k]]) / std::max(std::fabs(v), 1e-12));
      next[cols[k]] = v;
    }
    setParams(r.model, next);
    if (change < 1e-9) break;
  }
  double sum = 0;
  for (const Measurement& me : ms) {
    const double e = predict(me.algo, callOf(me), r.model).timeUs / me.timeUs - 1;
    sum += e * e;
  }
  r.rmsRelativeError = std::sqrt(sum / ms.size());
  r.model.source = "fitted to " + std::to_string(ms.size()) + " measurements (rms relative error " +
                   std::to_string(r.rmsRelativeError) + ")";
  return r;
}

}  // namespace tern::model
