// A cost model of tern's allreduce algorithms (issue 45): what each takes at
// a size, a rank count and a host layout, per link class; its parameters
// fitted from measurements by non-negative least squares; and the choice of
// the fastest.  Pure functions of their arguments, on the C++ standard
// library alone, so that libtern (a later TERN_ALGO=auto) and libtern_planner
// (tern-plan collectives) can both compile it.  docs/PLANNERS.md, "The
// collectives' cost model", says what each term means and where the defaults
// come from.
//
// The form is NCCL's (src/graph/tuning.cc): an algorithm is a sequence of
// steps, a step costs a latency plus its bytes over a bandwidth, and a step
// that uses links of several classes at once (a flat ring across hosts: shm
// inside a host, the network at its boundary) costs what its slowest class
// takes.  tern's own terms beside NCCL's: a per-reduced-byte cost (the CPU
// adds what it receives), a latency of the small path (comm/inline_calls.cc: whole
// messages on the caller's thread, no engine rounds), and the ternary codec,
// whose cost is the CPU's whatever link carries the codes.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace tern::model {

// The link classes a step can cross: shm inside a host; tcp or ucx between hosts.
enum class Link : int { Shm, Tcp, Ucx };
constexpr int kLinks = 3;
const char* linkName(Link l);                          // "shm", "tcp", "ucx"
bool parseLink(const std::string& name, Link* out);

// The allreduce's algorithms.  Names are TERN_ALGO's where it has them.
enum class Algo : int {
  Small,            // recursive doubling on the small path (at most TERN_SMALL_THRESHOLD bytes)
  RecursiveDoubling,  // "rd": through the engine
  Ring,             // "ring": the flat pipelined ring, ordered by host
  TwoLevel,         // "twolevel": reduce-scatter in each host, allreduce across hosts per local rank, allgather
  Ternary,          // "ternary": the ternary ring over all ranks (collectives/allreduce_ternary.cc)
  TernaryTwoLevel,  // "ternary-twolevel": dense inside each host, ternary across hosts
};
constexpr int kAlgos = 6;
const char* algoName(Algo a);
bool parseAlgo(const std::string& name, Algo* out);
inline bool isTernary(Algo a) { return a == Algo::Ternary || a == Algo::TernaryTwoLevel; }

// One link class's figures.  A network class's per-byte term is its host's
// NIC (every rank of a host shares it); shm's is one rank's copy.
struct LinkParams {
  double latencyUs = 0;        // per step through the engine (hand-off, descriptor, wake-up, the wire's delay)
  double smallLatencyUs = 0;   // per step on the small path
  double nsPerByte = 0;        // per byte a step moves through one endpoint
  double nsPerReducedByte = 0; // per byte a step adds into what it holds
};

struct Model {
  std::array<LinkParams, kLinks> links;
  // The ternary codec per byte of the caller's data in a reduce-scatter
  // hop's decode-add-encode pass (codec/); an allgather hop's decode is a
  // fixed share of it.  One term: a rank always does as much of one as of
  // the other, so no measurement could tell two terms apart.
  double codecNsPerByte = 0;
  std::string source;  // where the figures come from, one sentence
};

// This host's figures (perf/RESULTS.md, cited per field in the .cc) with tcp
// at 1 Gbit/s and ucx at a nominal 100 Gbit/s RDMA NIC.
Model defaultModel();

// Sets a network class to a wire of `gbps` (tern's tcp moved 88% of the
// wire's rate, which the per-byte term keeps) and, if latencyUs >= 0, that
// per-step latency on both paths.
void setNetwork(Model& m, Link l, double gbps, double latencyUs);
constexpr double kTcpWireShare = 0.88;

// The parameters as one vector (the fit's unknowns): per link class its four
// terms, then the codec's.
constexpr int kTermsPerLink = 4;
constexpr int kParams = kLinks * kTermsPerLink + 1;
using Params = std::array<double, kParams>;
Params paramsOf(const Model& m);
void setParams(Model& m, const Params& p);
std::string paramName(int i);  // "tcp.ns_per_byte"

// Ranks per host, hosts in rank order, each host's ranks contiguous.
struct Layout {
  std::vector<int> ranksPerHost;
  int ranks() const;
  int hosts() const { return static_cast<int>(ranksPerHost.size()); }
  int minLocal() const;
};
Layout evenLayout(int hosts, int ranksPerHost);
// `ranks` over `hosts` as evenly as can be, the first hosts one more.
Layout spreadLayout(int ranks, int hosts);

// One allreduce call.
struct Call {
  double bytes = 0;
  Layout layout;
  int dtypeBytes = 4;
  Link net = Link::Tcp;  // the class between hosts (inside one: shm)
  int blockSize = 256;   // the ternary scales' block (TERN_TERNARY_BLOCK)
  double chunkBytes = 512 << 10;  // the rings' chunk (TERN_CHUNKSIZE)
};

// Pieces a two-level plan cuts each host slice or block of `sliceBytes` in,
// to overlap its shm stages with its network ones (the ternary allreduce,
// allreduce_ternary.cc; the allgather, allgather_twolevel.cc): each piece
// holds at least 8 chunks, so its rings still stream; at most 8 pieces, so
// that filling and draining the overlap and the phases' ends stay a small
// part of the call (16 were slower for the ternary allreduce at 64 MiB:
// perf/RESULTS.md, 2026-12-05: the two-level ternary allreduce's stages
// overlapped).  The plans and the model share this rule.
int overlapPieces(double sliceBytes, double chunkBytes);

// Bits a sum of k ternary values takes in tern's codes: floor(log2 k) + 2,
// which is ceil(log2(2k + 1)) (codec/ternary_math.h's ternaryWidth).
int ternaryWidth(long long k);
constexpr int kCodecMaxWidth = 10;  // codec/ternary_math.h: wider sums run dense today

struct Prediction {
  Algo algo = Algo::Ring;
  double timeUs = 0;
  int bits = 0;           // ternary: the widest code (the sum's); dense: 0
  bool applies = true;    // false: the algorithm has no meaning here (why says so)
  std::string why;
  Params coeff{};         // timeUs = coeff . paramsOf(model), at the classes that were slowest
};
Prediction predict(Algo a, const Call& call, const Model& m);

// What may run: the small path up to smallBytes, the ternary ones from
// ternaryMinBytes and up to maxWidth bits (TERN_SMALL_THRESHOLD,
// TERN_TERNARY_MIN_BYTES, the codec's widest code).
struct Limits {
  double smallBytes = 32768;
  double ternaryMinBytes = 65536;
  int maxWidth = kCodecMaxWidth;
};
// Whether `p` may run under `lim` (it applies, and the limits allow it);
// `why` gets the reason when not.
bool runnable(const Prediction& p, const Call& call, const Limits& lim, std::string* why = nullptr);

struct Choice {
  Algo algo = Algo::Ring;
  double timeUs = 0;
  int bits = 0;
};
// The algorithm with the least predicted time among those that may run: the
// ternary ones for a ternary call (dense when none may: what tern does then),
// the dense ones otherwise.  Ties go to the earlier in Algo's order.
Choice choose(const Call& call, bool ternary, const Model& m, const Limits& lim = Limits());

// One timed call, for the fit.
struct Measurement {
  Algo algo = Algo::Ring;
  Link link = Link::Tcp;  // between hosts; shm when there is one host
  Layout layout;
  double bytes = 0;
  int dtypeBytes = 4;
  double timeUs = 0;
};

struct FitResult {
  Model model;
  std::array<bool, kParams> fitted{};  // the measurements determined it (else kept from the start)
  double rmsRelativeError = 0;         // of the fitted model over the measurements
  int iterations = 0;
};
// Non-negative least squares on relative errors, starting from `start`
// (whose values the parameters no measurement touches keep).  Throws
// std::invalid_argument with a sentence for an unusable measurement.
FitResult fit(const std::vector<Measurement>& ms, const Model& start);

}  // namespace tern::model
