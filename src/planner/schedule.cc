#include "planner/schedule.h"

#include "planner/kfkb.h"
#include "planner/shared_cores.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace tern::planner {
namespace {

Stage parseStage(const Json& v, const std::string& path) {
  expectOnlyFields(v, {"fwd_ms_per_sample", "bwd_ms_per_sample", "activation_bytes_per_sample",
                       "output_bytes_per_sample", "static_bytes", "memory_bytes", "background_cores"}, path);
  auto positive = [&](const char* key) { return expectPositive(member(v, key, path), fieldPath(path, key)); };
  Stage st;
  st.fwdMsPerSample = positive("fwd_ms_per_sample");
  st.bwdMsPerSample = positive("bwd_ms_per_sample");
  st.activationBytesPerSample = positive("activation_bytes_per_sample");
  st.staticBytes = positive("static_bytes");
  st.memoryBytes = positive("memory_bytes");
  const Json* out = v.find("output_bytes_per_sample");
  st.outputBytesPerSample = out ? expectPositive(*out, fieldPath(path, "output_bytes_per_sample"))
                                : st.activationBytesPerSample;
  if (const Json* bg = v.find("background_cores"))
    st.backgroundCores = expectNonNegative(*bg, fieldPath(path, "background_cores"));
  return st;
}

Link parseLink(const Json& v, const std::string& path) {
  expectOnlyFields(v, {"bandwidth_gbps", "latency_us"}, path);
  Link l;
  l.bandwidthGbps = expectPositive(member(v, "bandwidth_gbps", path), fieldPath(path, "bandwidth_gbps"));
  l.latencyUs = expectNonNegative(member(v, "latency_us", path), fieldPath(path, "latency_us"));
  return l;
}

std::vector<Link> parseNetwork(const Json& v, size_t nlinks) {
  if (v.type == Json::Type::Object) return std::vector<Link>(nlinks, parseLink(v, "network"));
  if (v.type != Json::Type::Array)
    throw InputError("network must be an object (every link) or a list of objects (one per link).");
  if (v.array.size() != nlinks)
    throw InputError("network lists " + std::to_string(v.array.size()) + " links but the stages need " +
                     std::to_string(nlinks) + " (one between each neighbouring pair).");
  std::vector<Link> links;
  for (size_t i = 0; i < nlinks; ++i) links.push_back(parseLink(v.array[i], indexPath("network", i)));
  return links;
}

// Where one stage is in its kFkB order (kfkb.h).
struct Cursor {
  int64_t op = 0;                // next group operation
  int64_t pos = 0;               // micro-batch within it
  int64_t freeAt = 0;            // ticks
  // Micro-batches finished each way.  Both run in ascending order, so the
  // neighbour's count says which inputs have arrived.
  int64_t forwardsDone = 0, backwardsDone = 0;
};

// One direction of one link: transfers leave in the order they are handed
// over (each stage produces micro-batches in ascending order, so this is
// also the order they become ready), one at a time; the latency is added
// after the transfer without occupying the wire.
struct Wire {  // in ticks
  int64_t busy = 0;  // serialisation time of one micro-batch
  int64_t latency = 0;
  int64_t freeAt = 0;
};

// The event graph of one candidate, evaluated in dependency order: each
// stage's operations are a fixed sequence, and an operation waits for its
// stage to be free and for its input (activation from s - 1, gradient from
// s + 1) to arrive.  Stages are advanced in sweeps down and up the pipeline
// until every operation has run; each operation is visited once.
//
// The planner's exhaustive search runs the hot loop (runGroup) hundreds of
// millions of times, and its speed is the latency of the chain "start =
// max(free, ready); free = start + t" per operation.  In integers that chain
// is three cycles instead of eight, so the simulation counts in ticks: one
// tick is 2^-60 of the candidate's fully serial time (every operation and
// transfer one after another, a bound on any makespan), so no sum can
// overflow and the rounding is far below a nanosecond.
class Simulation {
 public:
  Simulation(const PipelineModel& model, int64_t m, int64_t k, std::vector<TraceEvent>* trace)
      : p_(static_cast<int>(model.stages.size())), m_(m), k_(k), groups_((m + k - 1) / k), trace_(trace) {
    const double mb = static_cast<double>(model.batchSize / m);
    std::vector<double> fwdMs, bwdMs, busyMs, latencyMs;
    double serialMs = 0;
    for (int s = 0; s < p_; ++s) {
      fwdMs.push_back(model.stages[s].fwdMsPerSample * mb);
      bwdMs.push_back(model.stages[s].bwdMsPerSample * mb);
      serialMs += (fwdMs.back() + bwdMs.back()) * m;
    }
    for (int s = 0; s + 1 < p_; ++s) {
      busyMs.push_back(transferMs(model, s, mb));
      latencyMs.push_back(model.links[s].latencyUs * 1e-3);
      serialMs += 2 * (busyMs.back() + latencyMs.back()) * m;
    }
    tickMs_ = std::max(serialMs, 1e-300) / 1152921504606846976.0;  // 2^60
    for (int s = 0; s < p_; ++s) {
      tf_.push_back(ticks(fwdMs[s]));
      tb_.push_back(ticks(bwdMs[s]));
      order_.emplace_back(groups_, p_, s);
      cursors_.emplace_back();
    }
    for (int s = 0; s + 1 < p_; ++s) {
      Wire w;
      w.busy = ticks(busyMs[s]);
      w.latency = ticks(latencyMs[s]);
      down_.push_back(w);
      up_.push_back(w);
    }
    // Never read before written (see Cursor::forwardsDone): no clearing.
    fwdIn_.resize(std::max(fwdIn_.size(), static_cast<size_t>(p_) * m));
    bwdIn_.resize(std::max(bwdIn_.size(), static_cast<size_t>(p_) * m));
  }

  double run() { return trace_ ? sweep<true>() : sweep<false>(); }

 private:
  template <bool kTrace>
  double sweep() {  // returns the makespan in ms
    int64_t remaining = 2 * m_ * p_;
    while (remaining > 0) {
      int64_t before = remaining;
      for (int s = 0; s < p_; ++s) remaining -= advance<kTrace>(s);
      for (int s = p_ - 1; s >= 0; --s) remaining -= advance<kTrace>(s);
      if (remaining == before) throw std::logic_error("kFkB simulation made no progress (a schedule bug)");
    }
    int64_t end = 0;
    for (const Cursor& c : cursors_) end = std::max(end, c.freeAt);
    return ms(end);
  }

  // Runs stage s's operations until one waits for an input; returns how many ran.
  template <bool kTrace>
  int64_t advance(int s) {
    Cursor c = cursors_[s];
    const KfkbStage& order = order_[s];
    int64_t ran = 0;
    while (c.op < order.size()) {
      const GroupOp op = order[c.op];
      const bool forward = op.forward;
      const int64_t first = op.group * k_;
      const int64_t end = std::min(first + k_, m_);
      const int64_t from = first + c.pos;
      // The inputs at hand: the data at stage 0, the loss at the last stage,
      // else what the neighbour has finished.
      int64_t arrived = m_;
      if (forward && s > 0) arrived = cursors_[s - 1].forwardsDone;
      if (!forward && s + 1 < p_) arrived = cursors_[s + 1].backwardsDone;
      const int64_t stop = std::max(from, std::min(end, arrived));
      if (forward) runGroup<kTrace, true>(s, c.freeAt, from, stop);
      else runGroup<kTrace, false>(s, c.freeAt, from, stop);
      (forward ? c.forwardsDone : c.backwardsDone) += stop - from;
      ran += stop - from;
      if (stop < end) {
        c.pos = stop - first;
        break;
      }
      c.pos = 0;
      ++c.op;
    }
    cursors_[s] = c;
    return ran;
  }

  // Micro-batches [i, end) of one group at stage s, forwards or backwards,
  // their inputs arrived, each handing its output to the neighbour.
  template <bool kTrace, bool kForward>
  void runGroup(int s, int64_t& freeAt, int64_t i, int64_t end) {
    const int64_t t = kForward ? tf_[s] : tb_[s];
    const bool inputsAtHand = kForward ? s == 0 : s + 1 == p_;  // the data; the loss
    const bool sends = kForward ? s + 1 < p_ : s > 0;
    const int64_t* in = (kForward ? fwdIn_ : bwdIn_).data() + static_cast<size_t>(s) * m_;
    int64_t* out = nullptr;
    Wire* wire = nullptr;
    if (sends) {
      out = (kForward ? fwdIn_ : bwdIn_).data() + static_cast<size_t>(kForward ? s + 1 : s - 1) * m_;
      wire = kForward ? &down_[s] : &up_[s - 1];
    }
    const Wire w0 = sends ? *wire : Wire{};
    int64_t stageFree = freeAt, wireFree = w0.freeAt;
    for (; i < end; ++i) {
      const int64_t ready = inputsAtHand ? 0 : in[i];
      const int64_t start = std::max(stageFree, ready);
      stageFree = start + t;
      if (kTrace) record(kForward ? TraceEvent::Kind::Forward : TraceEvent::Kind::Backward, s, i, start, stageFree);
      if (!sends) continue;
      const int64_t leave = std::max(stageFree, wireFree);
      wireFree = leave + w0.busy;
      out[i] = wireFree + w0.latency;
      if (kTrace)
        record(kForward ? TraceEvent::Kind::ActivationSend : TraceEvent::Kind::GradientSend, s, i, leave, wireFree);
    }
    freeAt = stageFree;
    if (sends) wire->freeAt = wireFree;
  }

  void record(TraceEvent::Kind kind, int s, int64_t i, int64_t start, int64_t end) {
    trace_->push_back(TraceEvent{kind, s, i, ms(start), ms(end)});
  }

  int64_t ticks(double ms) const { return std::llround(ms / tickMs_); }
  double ms(int64_t ticks) const { return static_cast<double>(ticks) * tickMs_; }

  const int p_;
  const int64_t m_, k_, groups_;
  std::vector<TraceEvent>* trace_;
  double tickMs_ = 0;
  std::vector<int64_t> tf_, tb_;
  std::vector<KfkbStage> order_;
  std::vector<Cursor> cursors_;
  std::vector<Wire> down_, up_;        // down_[s]: s -> s+1 activations; up_[s]: s+1 -> s gradients
  // The arrival arrays reuse one thread's memory from candidate to candidate:
  // at batch 4096 they are 1 MiB, and a fresh allocation that size is an mmap
  // and 256 page faults, which cost more than the simulation itself.
  static thread_local std::vector<int64_t> arrivalsDown, arrivalsUp;
  std::vector<int64_t>& fwdIn_ = arrivalsDown;  // [s * m + i]: arrival at stage s
  std::vector<int64_t>& bwdIn_ = arrivalsUp;
};

thread_local std::vector<int64_t> Simulation::arrivalsDown, Simulation::arrivalsUp;

}  // namespace

PipelineModel parseModel(const Json& doc) {
  expectOnlyFields(doc, {"batch_size", "stages", "network", "cores"}, "");
  PipelineModel model;
  model.batchSize = expectPositiveInteger(member(doc, "batch_size", ""), "batch_size");
  const Json& stages = expectArray(member(doc, "stages", ""), "stages");
  if (stages.array.empty()) throw InputError("stages must list at least one stage.");
  for (size_t s = 0; s < stages.array.size(); ++s)
    model.stages.push_back(parseStage(stages.array[s], indexPath("stages", s)));
  model.links = parseNetwork(member(doc, "network", ""), model.stages.size() - 1);
  if (const Json* cores = doc.find("cores")) model.cores = expectPositiveInteger(*cores, "cores");
  return model;
}

void overrideBandwidth(PipelineModel& model, double gbps) {
  if (!(gbps > 0)) throw InputError("the bandwidth override must be positive.");
  for (Link& l : model.links) l.bandwidthGbps = gbps;
}

double peakMemoryBytes(const PipelineModel& model, size_t s, int64_t m, int64_t k) {
  const Stage& st = model.stages[s];
  const int64_t p = static_cast<int64_t>(model.stages.size());
  const int64_t inFlight = std::min(m, k * (p - static_cast<int64_t>(s)));
  return st.staticBytes + static_cast<double>(inFlight) * static_cast<double>(model.batchSize / m) *
                              st.activationBytesPerSample;
}

int64_t largestFittingK(const PipelineModel& model, int64_t m) {
  auto fits = [&](int64_t k) {
    for (size_t s = 0; s < model.stages.size(); ++s)
      if (peakMemoryBytes(model, s, m, k) > model.stages[s].memoryBytes) return false;
    return true;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = m;  // fits(lo); memory grows with K, so bisect
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

namespace {

bool sharesCores(const PipelineModel& model) {
  return model.cores > 0 && static_cast<size_t>(model.cores) < model.stages.size();
}

}  // namespace

double simulate(const PipelineModel& model, int64_t m, int64_t k, std::vector<TraceEvent>* trace) {
  if (m < 1 || model.batchSize % m != 0 || k < 1 || k > m)
    throw std::invalid_argument("simulate: m must divide the batch and 1 <= k <= m");
  if (sharesCores(model)) return simulateSharedCores(model, m, k, trace);
  return Simulation(model, m, k, trace).run();
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

std::vector<double> simulateAll(const PipelineModel& model, const std::vector<MicroK>& work, unsigned threads) {
  std::vector<double> times(work.size());
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failureLock;
  auto worker = [&] {
    try {
      for (size_t i; (i = next.fetch_add(1)) < work.size();) times[i] = simulate(model, work[i].m, work[i].k);
    } catch (...) {
      std::lock_guard<std::mutex> hold(failureLock);
      failure = std::current_exception();
      next = work.size();
    }
  };
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(work.size(), 1)));
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < threads; ++t) helpers.emplace_back(worker);
  worker();
  for (auto& h : helpers) h.join();
  if (failure) std::rethrow_exception(failure);
  return times;
}

namespace {

// The exhaustive search costs 2 p m operations per (m, K): a huge batch
// would run for hours or exhaust memory, so it is refused with a way out.
void checkWorkload(const PipelineModel& model, const std::vector<MicroK>& work) {
  constexpr double kLimit = 2e10;  // about half a minute on one 2020s core
  // Shared cores: every event visits every stage (shared_cores.h).
  const double perOp = sharesCores(model) ? static_cast<double>(model.stages.size()) : 1.0;
  double ops = 0;
  for (const MicroK& w : work) ops += 2.0 * static_cast<double>(model.stages.size()) * static_cast<double>(w.m) * perOp;
  if (ops > kLimit)
    throw InputError("planning batch_size " + std::to_string(model.batchSize) + " would simulate " + jsonNumber(ops) +
                     " operations, more than the limit of " + jsonNumber(kLimit) +
                     "; plan one split at a time (--microbatches) or a smaller batch.");
}

}  // namespace

Plan plan(const PipelineModel& model, int64_t onlyM, unsigned threads) {
  if (onlyM > 0 && model.batchSize % onlyM != 0)
    throw InputError("the micro-batch count " + std::to_string(onlyM) + " does not divide batch_size " +
                     std::to_string(model.batchSize) + ".");
  const std::vector<int64_t> splits = onlyM > 0 ? std::vector<int64_t>{onlyM} : divisors(model.batchSize);
  std::vector<int64_t> kmax;
  std::vector<MicroK> work;  // largest m first: the longest simulations start first on the threads
  for (auto m = splits.rbegin(); m != splits.rend(); ++m) {
    kmax.insert(kmax.begin(), largestFittingK(model, *m));
    for (int64_t k = kmax.front(); k >= 1; --k) work.push_back({*m, k});
  }
  checkWorkload(model, work);
  const std::vector<double> times = simulateAll(model, work, threads);
  Plan result;
  for (size_t j = 0; j < splits.size(); ++j) {
    Candidate c;
    c.microbatches = splits[j];
    c.microbatchSize = model.batchSize / splits[j];
    c.maxK = kmax[j];
    c.feasible = c.maxK > 0;
    c.iterationMs = std::numeric_limits<double>::quiet_NaN();
    // Every K up to the largest that fits is simulated; the largest wins ties
    // (same time, more slack under contention, seed 001).  Ties are exact:
    // one m's candidates count in the same ticks.
    for (size_t w = 0; w < work.size(); ++w)
      if (work[w].m == c.microbatches && (c.k == 0 || times[w] < c.iterationMs)) {
        c.k = work[w].k;
        c.iterationMs = times[w];
      }
    for (size_t s = 0; s < model.stages.size(); ++s)
      c.peakMemoryBytes.push_back(peakMemoryBytes(model, s, c.microbatches, std::max<int64_t>(c.k, 1)));
    if (c.feasible && (result.best < 0 || c.iterationMs < result.candidates[result.best].iterationMs))
      result.best = static_cast<int>(result.candidates.size());
    result.candidates.push_back(std::move(c));
  }
  return result;
}

namespace {

std::string candidateFields(const Candidate& c) {
  return "\"microbatches\": " + jsonNumber(c.microbatches) + ", \"microbatch_size\": " +
         jsonNumber(c.microbatchSize) + ", \"k\": " + jsonNumber(c.k) +
         ", \"iteration_ms\": " + jsonNumber(c.iterationMs);
}

}  // namespace

std::string planJson(const Plan& plan) {
  std::string out = "{\"best\": ";
  out += plan.best < 0 ? "null" : "{" + candidateFields(plan.candidates[plan.best]) + "}";
  out += ",\n \"candidates\": [";
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const Candidate& c = plan.candidates[i];
    out += i ? ",\n  {" : "\n  {";
    out += candidateFields(c) + ", \"max_k\": " + jsonNumber(c.maxK) + ", \"peak_memory_bytes\": [";
    for (size_t s = 0; s < c.peakMemoryBytes.size(); ++s)
      out += (s ? ", " : "") + jsonNumber(c.peakMemoryBytes[s]);
    out += "], \"feasible\": ";
    out += c.feasible ? "true}" : "false}";
  }
  out += "\n ]}\n";
  return out;
}

}  // namespace tern::planner
