// The kFkB pipeline planner (docs/DESIGN.md, "kFkB pipeline planner").
//
// A pipeline of p stages trains one batch as m micro-batches.  Each stage
// runs K forwards, then K backwards (groups of K micro-batches in 1F1B order:
// K = 1 is 1F1B, K = m is GPipe).  A larger K keeps more activations alive
// (memory) but lets transfers overlap more compute; the planner picks the
// split m and the K that are fastest by simulating every candidate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"

namespace tern::planner {

struct Stage {
  double fwdMsPerSample = 0;
  double bwdMsPerSample = 0;
  double activationBytesPerSample = 0;  // kept alive per in-flight sample (memory)
  double outputBytesPerSample = 0;      // sent to the next stage per sample (network)
  double staticBytes = 0;
  double memoryBytes = 0;
  // With shared cores (PipelineModel::cores): the part of a core the stage's
  // process takes outside its operations for as long as it has operations
  // left (receiving, handing sends over, waiting on shared memory).  Model
  // field "background_cores", optional, default 0.
  double backgroundCores = 0;
};

struct Link {  // between stage s and s + 1, both directions alike
  double bandwidthGbps = 0;  // +infinity: transfers take no time
  double latencyUs = 0;
};

struct PipelineModel {
  int64_t batchSize = 0;
  std::vector<Stage> stages;
  std::vector<Link> links;  // stages.size() - 1 of them
  // The processors the stages' computations share (stages on one host that
  // has fewer cores than stages, e.g. CPU stages); 0: each stage computes on
  // its own device.  Model field "cores", optional.
  int64_t cores = 0;
};

// Reads docs/DESIGN.md's model.json (already parsed).  Throws InputError naming
// the field.  `network` is one object for every link or a list, one per link.
// A stage may give `output_bytes_per_sample` (what crosses to the next
// stage); without it the activation bytes are what is sent.
PipelineModel parseModel(const Json& doc);
// Every link's bandwidth set to `gbps` (re-planning under measured contention).
void overrideBandwidth(PipelineModel& model, double gbps);

// The wire time (ms) of one micro-batch of `samples` from stage `link` to
// stage link + 1 (either way: gradients are the activations' size); the
// link's latency comes after it without occupying the wire.
inline double transferMs(const PipelineModel& model, size_t link, double samples) {
  return model.stages[link].outputBytesPerSample * samples * 8e-6 / model.links[link].bandwidthGbps;
}

// docs/DESIGN.md's memory rule at stage s for m micro-batches, groups of K.
double peakMemoryBytes(const PipelineModel& model, size_t s, int64_t m, int64_t k);
// The largest K in 1..m that fits every stage, 0 when even K = 1 does not.
int64_t largestFittingK(const PipelineModel& model, int64_t m);

// One bar of the chosen schedule, for the gantt chart.
struct TraceEvent {
  enum class Kind { Forward, Backward, ActivationSend, GradientSend };
  Kind kind;
  int stage;        // compute: the stage; transfers: the sending stage
  int64_t micro;    // micro-batch index
  double startMs, endMs;  // transfers: the link's busy interval (latency after it)
};

// The iteration time (ms) of the kFkB schedule of m micro-batches and
// group size k, simulated as an event graph; with `trace`, every event.
// With model.cores below the stage count, the stages that have work at hand
// share those cores equally (processor sharing), so an operation stretches
// while more stages compute than there are cores.
// Preconditions: m divides batchSize, 1 <= k <= m.
double simulate(const PipelineModel& model, int64_t m, int64_t k, std::vector<TraceEvent>* trace = nullptr);

struct Candidate {
  int64_t microbatches = 0;
  int64_t microbatchSize = 0;
  int64_t k = 0;               // the fastest K that fits; 0 when infeasible
  int64_t maxK = 0;            // seed 001's K: the largest that fits memory; 0 when infeasible
  double iterationMs = 0;      // NaN when infeasible
  std::vector<double> peakMemoryBytes;  // at k (at K = 1 when infeasible)
  bool feasible = false;
};

struct Plan {
  std::vector<Candidate> candidates;  // by ascending m
  int best = -1;                      // index of the fastest, -1 when none fits
};

// Every m dividing the batch (or only `onlyM` when it is > 0; it must divide
// the batch, else InputError).  For each, every K from 1 to the largest that
// fits memory is simulated and the fastest kept (the largest on a tie): with
// heterogeneous stages a smaller K can be faster (1F1B's steady state costs
// max_s(t_f + t_b), GPipe's max_s t_f + max_s t_b), so only the whole range
// makes the choice the model's optimum.  `threads` 0: one per CPU.
Plan plan(const PipelineModel& model, int64_t onlyM = 0, unsigned threads = 0);

// simulate() of each (m, K), spread over `threads` (0: one per CPU).
struct MicroK {
  int64_t m, k;
};
std::vector<double> simulateAll(const PipelineModel& model, const std::vector<MicroK>& work, unsigned threads = 0);

// The plan as docs/DESIGN.md's output JSON.
std::string planJson(const Plan& plan);

// The ascending divisors of n.
std::vector<int64_t> divisors(int64_t n);

}  // namespace tern::planner
