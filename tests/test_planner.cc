// The planners (src/planner): JSON, the memory rule, the kFkB simulator
// against hand-computed schedules and an independent brute force, TicTac's
// TIC/TAC on hand-made graphs, and tern-plan's error handling.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "model/model_file.h"
#include "planner/gantt.h"
#include "base/json.h"
#include "planner/kfkb.h"
#include "planner/priority.h"
#include "planner/schedule.h"
#include "planner/shared_cores.h"
#include "planner/tern_plan.h"
#include "tern/tern.h"

using namespace tern;
using namespace tern::planner;

namespace {

const double kNoNetwork = std::numeric_limits<double>::infinity();

Stage stage(double fwd, double bwd, double act = 1e6, double memory = 1e18, double staticBytes = 1e6) {
  Stage s;
  s.fwdMsPerSample = fwd;
  s.bwdMsPerSample = bwd;
  s.activationBytesPerSample = s.outputBytesPerSample = act;
  s.staticBytes = staticBytes;
  s.memoryBytes = memory;
  return s;
}

PipelineModel pipeline(int64_t batch, std::vector<Stage> stages, double gbps = kNoNetwork, double latencyUs = 0) {
  PipelineModel m;
  m.batchSize = batch;
  m.stages = std::move(stages);
  m.links.assign(m.stages.size() - 1, Link{gbps, latencyUs});
  return m;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

PipelineModel modelFrom(const std::string& json) { return parseModel(parseJson(json, "model.json")); }

const char kModel[] = R"({"batch_size": 8,
  "stages": [{"fwd_ms_per_sample": 1, "bwd_ms_per_sample": 2, "activation_bytes_per_sample": 1000,
              "static_bytes": 100, "memory_bytes": 1e9},
             {"fwd_ms_per_sample": 1, "bwd_ms_per_sample": 2, "activation_bytes_per_sample": 1000,
              "static_bytes": 100, "memory_bytes": 1e9}],
  "network": {"bandwidth_gbps": 1, "latency_us": 10}})";

// ---- JSON ------------------------------------------------------------------

TEST(PlannerJson, ParsesValuesAndEscapes) {
  Json v = parseJson(R"({"a": [1, -2.5e3, true, false, null], "s": "x\"\\\u00e9\ud83d\ude00"})", "t");
  ASSERT_EQ(v.find("a")->array.size(), 5u);
  EXPECT_EQ(v.find("a")->array[1].number, -2500);
  EXPECT_TRUE(v.find("a")->array[2].boolean);
  EXPECT_FALSE(v.find("a")->array[3].boolean);
  EXPECT_EQ(v.find("a")->array[4].type, Json::Type::Null);
  EXPECT_EQ(v.find("s")->string, "x\"\\\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(parseJson(jsonString("a\"b\n\x01"), "t").string, "a\"b\n\x01");
}

TEST(PlannerJson, RejectsWhatJsonDoesNotAllowWithThePosition) {
  for (const char* bad : {"{\"a\": 1,}", "[1, 2", "{\"a\": 1, \"a\": 2}", "01", "1.", "+1", "'x'", "{a: 1}",
                          "[1] 2", "NaN", "\"tab\there\"", "1e999"})
    EXPECT_NE(errorOf([&] { parseJson(bad, "in.json"); }).find("in.json is not valid JSON"), std::string::npos) << bad;
  EXPECT_NE(errorOf([&] { parseJson("{\n  \"a\": 1,\n  }", "in.json"); }).find("line 3, column 3"), std::string::npos);
  EXPECT_NE(errorOf([&] { parseJson(std::string(1000, '['), "in.json"); }).find("nesting"), std::string::npos);
}

TEST(PlannerJson, NumbersWriteBackExactly) {
  EXPECT_EQ(jsonNumber(8e9), "8000000000");
  EXPECT_EQ(jsonNumber(-3), "-3");
  EXPECT_DOUBLE_EQ(std::stod(jsonNumber(644.10256)), 644.10256);
  EXPECT_EQ(jsonNumber(std::nan("")), "null");
}

// ---- model.json ---------------------------------------------------------------

TEST(PlannerModel, ReadsDesignFormatAndPerLinkNetwork) {
  PipelineModel m = modelFrom(kModel);
  EXPECT_EQ(m.batchSize, 8);
  ASSERT_EQ(m.links.size(), 1u);
  EXPECT_EQ(m.links[0].bandwidthGbps, 1);
  EXPECT_EQ(m.stages[1].outputBytesPerSample, 1000);  // defaults to the activation bytes
  std::string perLink = kModel;
  perLink.replace(perLink.find("{\"bandwidth_gbps\": 1"), std::string("{\"bandwidth_gbps\": 1, \"latency_us\": 10}").size(),
                  "[{\"bandwidth_gbps\": 7, \"latency_us\": 0}]");
  EXPECT_EQ(modelFrom(perLink).links[0].bandwidthGbps, 7);
  overrideBandwidth(m, 0.25);
  EXPECT_EQ(m.links[0].bandwidthGbps, 0.25);
}

TEST(PlannerModel, EveryBadFieldIsNamed) {
  struct Case {
    std::string from, to, named;
  };
  const Case cases[] = {
      {"\"batch_size\": 8", "\"batch_size\": 0", "batch_size must be positive"},
      {"\"batch_size\": 8", "\"batch_size\": 7.5", "batch_size must be a whole number"},
      {"\"batch_size\": 8,", "", "the field batch_size is missing"},
      {"\"memory_bytes\": 1e9}]", "\"memory_bytes\": -1}]", "stages[1].memory_bytes must be positive"},
      {"\"fwd_ms_per_sample\": 1,", "", "the field stages[0].fwd_ms_per_sample is missing"},
      {"\"static_bytes\": 100, \"memory_bytes\": 1e9}]", "\"static_bytes\": \"x\", \"memory_bytes\": 1e9}]",
       "stages[1].static_bytes must be a number, not a string"},
      {"\"latency_us\": 10", "\"latency_us\": -1", "network.latency_us must not be negative"},
      {"{\"bandwidth_gbps\": 1, \"latency_us\": 10}", "[]", "network lists 0 links but the stages need 1"},
      {"\"latency_us\": 10", "\"latency_us\": 10, \"bw\": 3", "network.bw is not a known field"},
      {"\"network\"", "\"netwerk\"", "netwerk is not a known field"},
      {"\"batch_size\": 8,", "\"batch_size\": 8, \"cores\": 0,", "cores must be positive"},
      {"\"memory_bytes\": 1e9}]", "\"memory_bytes\": 1e9, \"background_cores\": -0.5}]",
       "stages[1].background_cores must not be negative"},
      {"\"batch_size\": 8,", "\"batch_size\": 8, \"cores\": 1.5,", "cores must be a whole number"},
  };
  for (const Case& c : cases) {
    std::string json = kModel;
    const size_t at = json.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    json.replace(at, c.from.size(), c.to);
    EXPECT_NE(errorOf([&] { modelFrom(json); }).find(c.named), std::string::npos)
        << c.named << " <- " << errorOf([&] { modelFrom(json); });
  }
  PipelineModel m = modelFrom(kModel);
  EXPECT_NE(errorOf([&] { plan(m, 3); }).find("3 does not divide batch_size 8"), std::string::npos);
}

// ---- the memory rule ------------------------------------------------------------

TEST(PlannerMemory, DesignRuleAndLargestK) {
  // 4 stages, 16 micro-batches of 2 samples, 10 bytes a sample, 100 static.
  PipelineModel m = pipeline(32, std::vector<Stage>(4, stage(1, 1, 10, 1e9, 100)));
  EXPECT_EQ(peakMemoryBytes(m, 0, 16, 1), 100 + 4 * 2 * 10);   // K (p - s) = 4 in flight
  EXPECT_EQ(peakMemoryBytes(m, 3, 16, 3), 100 + 3 * 2 * 10);   // K (p - s) = 3
  EXPECT_EQ(peakMemoryBytes(m, 0, 16, 5), 100 + 16 * 2 * 10);  // capped at m
  // Stage 1 may hold 200 bytes of activations: K (4 - 1) * 2 * 10 <= 200 -> K <= 3.
  m.stages[1].memoryBytes = 300;
  EXPECT_EQ(largestFittingK(m, 16), 3);
  m.stages[1].memoryBytes = 159;  // K = 1 keeps 3 micro-batches in flight there: 100 + 60 > 159
  EXPECT_EQ(largestFittingK(m, 16), 0);
  Plan p = plan(m);
  for (const Candidate& c : p.candidates) {
    EXPECT_EQ(c.feasible, largestFittingK(m, c.microbatches) > 0);
    if (!c.feasible) EXPECT_TRUE(std::isnan(c.iterationMs));
  }
}

TEST(PlannerPlan, RefusesASearchThatWouldRunForHours) {
  PipelineModel huge = pipeline(1 << 20, std::vector<Stage>(2, stage(1, 2)));
  EXPECT_NE(errorOf([&] { plan(huge); }).find("more than the limit"), std::string::npos);
  EXPECT_EQ(plan(huge, 64).candidates.size(), 1u);  // one split is still fine
}

// ---- the simulator ---------------------------------------------------------------

TEST(PlannerSimulate, UniformWithoutNetworkIsTheFormulaForEveryK) {
  for (int p = 1; p <= 5; ++p) {
    PipelineModel m = pipeline(24, std::vector<Stage>(p, stage(0.5, 1.25)));
    for (int64_t mb : divisors(24))
      for (int64_t k = 1; k <= mb; ++k) {
        const double tf = 0.5 * (24 / mb), tb = 1.25 * (24 / mb);
        EXPECT_NEAR(simulate(m, mb, k), (mb + p - 1) * (tf + tb), 1e-9) << "p " << p << " m " << mb << " K " << k;
      }
  }
}

TEST(PlannerSimulate, SingleStageRunsTheBatchOnce) {
  PipelineModel m = pipeline(12, {stage(0.3, 0.7)});
  for (int64_t mb : divisors(12)) EXPECT_NEAR(simulate(m, mb, 1), 12 * (0.3 + 0.7), 1e-9);
}

TEST(PlannerSimulate, NetworkBoundCaseByHand) {
  // Two stages, m = 2, K = 1; 1 ms forward, 2 ms backward per micro-batch; a
  // transfer occupies the link 10 ms (1.25 MB at 1 Gbit/s) and lands 0.5 ms later.
  //  stage 0: F0 [0,1] F1 [1,2]; activations on the link [1,11] [11,21], land 11.5, 21.5
  //  stage 1: F0 [11.5,12.5] B0 [12.5,14.5] F1 [21.5,22.5] B1 [22.5,24.5]
  //  gradients up [14.5,24.5] [24.5,34.5], land 25, 35; stage 0: B0 [25,27] B1 [35,37]
  PipelineModel m = pipeline(2, std::vector<Stage>(2, stage(1, 2, 1.25e6)), 1.0, 500);
  EXPECT_NEAR(simulate(m, 2, 1), 37, 1e-9);
  std::vector<TraceEvent> trace;
  simulate(m, 2, 1, &trace);
  EXPECT_EQ(trace.size(), 2u * 2 * 2 + 2u * 2);  // 8 computations, 4 transfers
  double lastGradient = 0;
  for (const TraceEvent& e : trace)
    if (e.kind == TraceEvent::Kind::GradientSend) lastGradient = std::max(lastGradient, e.endMs);
  EXPECT_NEAR(lastGradient, 34.5, 1e-9);
}

TEST(PlannerSimulate, TraceNeverOverlapsOnAStageOrALink) {
  PipelineModel m = pipeline(16, {stage(1, 2), stage(2, 1), stage(1.5, 1.5)}, 2.0, 20);
  std::vector<TraceEvent> trace;
  const double total = simulate(m, 8, 3, &trace);
  std::map<std::pair<int, int>, double> busyUntil;  // (kind lane, stage) -> end of the last bar
  for (const TraceEvent& e : trace) {
    const bool compute = e.kind == TraceEvent::Kind::Forward || e.kind == TraceEvent::Kind::Backward;
    const std::pair<int, int> lane{compute ? 0 : static_cast<int>(e.kind), e.stage};
    EXPECT_GE(e.startMs + 1e-9, busyUntil[lane]);
    busyUntil[lane] = e.endMs;
    EXPECT_LE(e.endMs, total + 1e-9);
  }
}

// ---- stages that share cores (shared_cores.h) -------------------------------------

TEST(PlannerSharedCores, ReadsTheOptionalField) {
  EXPECT_EQ(modelFrom(kModel).cores, 0);
  std::string json = kModel;
  const std::string batch = "\"batch_size\": 8,";
  json.replace(json.find(batch), batch.size(), batch + " \"cores\": 1,");
  EXPECT_EQ(modelFrom(json).cores, 1);
}

TEST(PlannerSharedCores, WithACoreEachItIsTheDedicatedSimulation) {
  // The time-ordered simulation given as many cores as stages must reproduce
  // the dedicated sweep exactly: same operation order, same links.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> t(0.1, 3), gbps(0.5, 20), lat(0, 300);
  for (int trial = 0; trial < 60; ++trial) {
    const int p = 2 + trial % 4;
    std::vector<Stage> stages;
    for (int s = 0; s < p; ++s) stages.push_back(stage(t(rng), t(rng), 1e5 * t(rng)));
    PipelineModel m = pipeline(24, stages, gbps(rng), lat(rng));
    m.cores = p;
    for (int64_t mb : {1, 2, 3, 8, 24})
      for (int64_t k : {int64_t{1}, (mb + 1) / 2, mb})
        EXPECT_NEAR(simulateSharedCores(m, mb, k, nullptr), simulate(m, mb, k), 1e-9 * simulate(m, mb, k))
            << "p " << p << " m " << mb << " K " << k;
  }
}

TEST(PlannerSharedCores, OneCoreWithoutNetworkRunsEveryOperationBackToBack) {
  // One core and transfers that take no time: the core is never idle (some
  // stage always has its input), so the batch takes the sum of all work.
  PipelineModel m = pipeline(12, {stage(1, 2), stage(0.5, 1), stage(2, 0.25)});
  m.cores = 1;
  const double work = 12 * (1 + 2 + 0.5 + 1 + 2 + 0.25);
  for (int64_t mb : divisors(12))
    for (int64_t k = 1; k <= mb; ++k) EXPECT_NEAR(simulate(m, mb, k), work, 1e-9 * work) << mb << " " << k;
}

TEST(PlannerSharedCores, FewerCoresNeverFasterAndNeverBelowTheWorkBound) {
  PipelineModel m = pipeline(32, {stage(1, 2), stage(2, 1), stage(1.5, 1.5), stage(1, 1)}, 2.0, 50);
  const double work = 32 * (3 + 3 + 3 + 2);
  for (int64_t mb : {2, 8, 32})
    for (int64_t k : {int64_t{1}, mb}) {
      double slower = 0;
      for (int64_t cores : {4, 3, 2, 1}) {  // 4: a core each, the dedicated model
        m.cores = cores;
        const double t = simulate(m, mb, k);
        EXPECT_GE(t + 1e-9, slower) << cores << " cores, m " << mb << " K " << k;
        EXPECT_GE(t + 1e-9, work / static_cast<double>(cores));
        slower = t;
      }
    }
}

TEST(PlannerSharedCores, TwoStagesOnOneCoreByHand) {
  // m = 2, K = 1, 1 ms forward and 2 ms backward per micro-batch, instant links:
  //  [0,1] F0 at stage 0 alone; [1,3] stage 0's F1 and stage 1's F0 share the
  //  core, both end at 3; [3,5] stage 1's B0 alone (stage 0 waits for its
  //  gradient); from 5 stage 0's B0 (2) and stage 1's F1 (1) share: F1 ends at
  //  7, then B0 (1 left) with stage 1's B1 (2): B0 ends at 9; B1 alone [9,10];
  //  stage 0's B1 [10,12].  Dedicated cores would take 9.
  PipelineModel m = pipeline(2, std::vector<Stage>(2, stage(1, 2)));
  m.cores = 1;
  std::vector<TraceEvent> trace;
  EXPECT_NEAR(simulate(m, 2, 1, &trace), 12, 1e-9);
  EXPECT_EQ(trace.size(), 2u * 2 * 2 + 2u * 2);
  auto endOf = [&](int s, TraceEvent::Kind kind, int64_t i) {
    for (const TraceEvent& e : trace)
      if (e.stage == s && e.kind == kind && e.micro == i) return e.endMs;
    return -1.0;
  };
  EXPECT_NEAR(endOf(1, TraceEvent::Kind::Forward, 1), 7, 1e-9);
  EXPECT_NEAR(endOf(0, TraceEvent::Kind::Backward, 0), 9, 1e-9);
  EXPECT_NEAR(endOf(1, TraceEvent::Kind::Backward, 1), 10, 1e-9);
  m.cores = 0;
  EXPECT_NEAR(simulate(m, 2, 1), 9, 1e-9);
}

TEST(PlannerSharedCores, BackgroundLoadCompetesWhileAStageHasWorkLeft) {
  // Two stages on one core, each process also taking half a core outside its
  // operations until its last one ends; m = 1, 1 ms forward, 2 ms backward:
  //  stage 0's F0: 1 + 0.5 + 0.5 demand, half the core: [0,2]; stage 1's F0
  //  [2,4] and B0 [4,8] likewise; stage 1 is then done, so stage 0's B0 gets
  //  1 / 1.5 of the core: 2 ms of work in 3, [8,11].
  PipelineModel m = pipeline(1, std::vector<Stage>(2, stage(1, 2)));
  m.cores = 1;
  for (Stage& s : m.stages) s.backgroundCores = 0.5;
  EXPECT_NEAR(simulate(m, 1, 1), 11, 1e-9);
  m.cores = 2;  // a core each: the dedicated model, which has no background load
  EXPECT_NEAR(simulate(m, 1, 1), 6, 1e-9);
}

// ---- the kFkB order (kfkb.h) ---------------------------------------------------

std::string orderText(int64_t m, int64_t k, int stages, int stage) {
  std::string got;
  for (auto [forward, i] : kfkbOrder(m, k, stages, stage)) got += (forward ? "F" : "B") + std::to_string(i) + " ";
  return got;
}

TEST(PlannerKfkb, OrdersByHand) {
  // Stage 1 of 3, m = 6, K = 2: two warm-up groups, then backward/forward groups in turn.
  EXPECT_EQ(orderText(6, 2, 3, 1), "F0 F1 F2 F3 B0 B1 F4 F5 B2 B3 B4 B5 ");
  EXPECT_EQ(orderText(3, 1, 2, 1), "F0 B0 F1 B1 F2 B2 ");        // the last stage of 1F1B
  EXPECT_EQ(orderText(3, 3, 4, 0), "F0 F1 F2 B0 B1 B2 ");        // GPipe
  EXPECT_EQ(orderText(5, 2, 2, 0), "F0 F1 F2 F3 B0 B1 F4 B2 B3 B4 ");  // a short last group
  EXPECT_EQ(orderText(4, 1, 6, 5), "F0 B0 F1 B1 F2 B2 F3 B3 ");
}

TEST(PlannerKfkb, EveryOrderRunsEachMicroBatchOnceEachWayWithinTheMemoryRule) {
  for (int64_t m = 1; m <= 24; ++m)
    for (int64_t k = 1; k <= m; ++k)
      for (int p = 1; p <= 7; ++p)
        for (int s = 0; s < p; ++s) {
          int64_t forwards = 0, backwards = 0, peak = 0;
          for (auto [forward, i] : kfkbOrder(m, k, p, s)) {
            // Each way in ascending order (the gradient sum's fixed order); a
            // backward only after its forward.
            ASSERT_EQ(i, forward ? forwards++ : backwards++) << m << " " << k << " " << p << " " << s;
            ASSERT_LE(backwards, forwards);
            peak = std::max(peak, forwards - backwards);
          }
          ASSERT_EQ(forwards, m);
          ASSERT_EQ(backwards, m);
          EXPECT_EQ(peak, std::min(m, k * (p - s))) << m << " " << k << " " << p << " " << s;  // the memory rule
        }
}

TEST(PlannerKfkb, GroupOpsAlternateAfterTheWarmUp) {
  const KfkbStage stage(5, 4, 1);  // 5 groups, stage 1 of 4: 3 warm-up forward groups
  std::string got;
  for (int64_t j = 0; j < stage.size(); ++j) got += (stage[j].forward ? "F" : "B") + std::to_string(stage[j].group);
  EXPECT_EQ(got, "F0F1F2B0F3B1F4B2B3B4");
}

TEST(PlannerPlan, SmallerKWinsWhenBottlenecksSitOnDifferentStages) {
  // Stage 0 is slow forward, stage 1 slow backward: 1F1B's steady state costs
  // max(f + b) = 4 per micro-batch, GPipe's max f + max b = 6.
  PipelineModel m = pipeline(8, {stage(3, 1), stage(1, 3)});
  Plan p = plan(m, 8);
  ASSERT_EQ(p.best, 0);
  EXPECT_LT(p.candidates[0].k, 8);
  EXPECT_EQ(p.candidates[0].maxK, 8);  // memory allows GPipe; the chosen K is smaller, max_k says both
  EXPECT_LT(p.candidates[0].iterationMs, simulate(m, 8, 8));
}

TEST(PlannerPlan, LargerKPaysWhenTransfersAreSlow) {
  // Seed 001's point: with slow links, more micro-batches in flight hide the
  // round trip.  Uniform stages, so without the network every K ties (and
  // the largest is kept).
  PipelineModel fast = pipeline(16, std::vector<Stage>(4, stage(1, 2)));
  EXPECT_EQ(plan(fast, 16).candidates[0].k, 16);
  PipelineModel slow = pipeline(16, std::vector<Stage>(4, stage(1, 2, 1e5)), 1.0, 3000);
  EXPECT_LT(simulate(slow, 16, 4), simulate(slow, 16, 1));
  EXPECT_GT(plan(slow, 16).candidates[0].k, 1);
  // Re-planning for less bandwidth never predicts a faster iteration.
  PipelineModel congested = slow;
  overrideBandwidth(congested, 0.1);
  EXPECT_GT(plan(congested).candidates[plan(congested).best].iterationMs,
            plan(slow).candidates[plan(slow).best].iterationMs);
}

// An independent evaluation of the same event graph: every stage's sequence
// written out, then passes over all operations until every time is known.
double bruteForceTime(const PipelineModel& model, int64_t m, int64_t k) {
  const int p = static_cast<int>(model.stages.size());
  const double mb = static_cast<double>(model.batchSize / m);
  std::vector<std::vector<std::pair<bool, int64_t>>> seq(p);  // (forward?, micro-batch)
  for (int s = 0; s < p; ++s) {
    std::vector<std::vector<int64_t>> groups;
    for (int64_t i = 0; i < m; ++i) {
      if (i % k == 0) groups.emplace_back();
      groups.back().push_back(i);
    }
    const size_t G = groups.size(), warm = std::min<size_t>(G, p - s);
    auto add = [&](bool f, size_t g) {
      for (int64_t i : groups[g]) seq[s].push_back({f, i});
    };
    for (size_t g = 0; g < warm; ++g) add(true, g);
    for (size_t b = 0, f = warm; b < G; ++b) {
      add(false, b);
      if (f < G) add(true, f++);
    }
  }
  const double nan = std::nan("");
  std::vector<std::vector<double>> fEnd(p, std::vector<double>(m, nan)), bEnd = fEnd;
  std::vector<std::vector<double>> down(p, std::vector<double>(m, nan)), up = down;  // link busy ends
  auto wire = [&](std::vector<double>& lane, int link, int64_t i, double ready) {
    if (std::isnan(ready) || (i > 0 && std::isnan(lane[i - 1]))) return nan;
    const Link& l = model.links[link];
    const double busy = model.stages[link].outputBytesPerSample * mb * 8e-6 / l.bandwidthGbps;
    lane[i] = std::max(ready, i > 0 ? lane[i - 1] : 0.0) + busy;
    return lane[i] + l.latencyUs * 1e-3;
  };
  std::vector<size_t> next(p, 0);
  std::vector<double> stageFree(p, 0);
  std::vector<std::vector<double>> fIn(p, std::vector<double>(m, nan)), bIn = fIn;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s)
      while (next[s] < seq[s].size()) {
        auto [forward, i] = seq[s][next[s]];
        const double ready = forward ? (s == 0 ? 0 : fIn[s][i]) : (s == p - 1 ? fEnd[s][i] : bIn[s][i]);
        if (std::isnan(ready)) break;
        const double end = std::max(stageFree[s], ready) +
                           mb * (forward ? model.stages[s].fwdMsPerSample : model.stages[s].bwdMsPerSample);
        stageFree[s] = end;
        (forward ? fEnd : bEnd)[s][i] = end;
        if (forward && s + 1 < p) fIn[s + 1][i] = wire(down[s], s, i, end);
        if (!forward && s > 0) bIn[s - 1][i] = wire(up[s - 1], s - 1, i, end);
        ++next[s];
        progress = true;
      }
  }
  double total = 0;
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(next[s], seq[s].size()) << "brute force stuck";
    total = std::max(total, stageFree[s]);
  }
  return total;
}

TEST(PlannerPlan, AgreesWithBruteForceOverEveryMAndK) {
  std::mt19937 rng(2026);
  std::uniform_real_distribution<double> u(0.05, 2.0);
  for (int trial = 0; trial < 60; ++trial) {
    const int p = 1 + static_cast<int>(rng() % 5);
    const int64_t batches[] = {12, 16, 18, 24};
    PipelineModel m;
    m.batchSize = batches[rng() % 4];
    for (int s = 0; s < p; ++s) {
      Stage st = stage(u(rng), u(rng), 1e5 * u(rng), 0, 1e6 * u(rng));
      st.outputBytesPerSample = 1e5 * u(rng);
      st.memoryBytes = st.staticBytes + st.activationBytesPerSample * m.batchSize * u(rng);  // some splits too big
      m.stages.push_back(st);
    }
    for (int s = 0; s + 1 < p; ++s) m.links.push_back(Link{u(rng) * u(rng) * 4, 200 * u(rng)});
    double best = std::numeric_limits<double>::infinity();
    for (int64_t mb : divisors(m.batchSize))
      for (int64_t k = 1; k <= largestFittingK(m, mb); ++k) {
        const double t = bruteForceTime(m, mb, k);
        EXPECT_NEAR(simulate(m, mb, k), t, 1e-9 * t) << "trial " << trial << " m " << mb << " K " << k;
        best = std::min(best, t);
      }
    Plan pl = plan(m);
    if (std::isinf(best)) {
      EXPECT_EQ(pl.best, -1);
      continue;
    }
    ASSERT_GE(pl.best, 0);
    EXPECT_NEAR(pl.candidates[pl.best].iterationMs, best, 1e-9 * best) << "trial " << trial;
  }
}

TEST(PlannerPlan, JsonHasDesignFields) {
  PipelineModel m = modelFrom(kModel);
  m.stages[0].memoryBytes = 100 + 4 * 1000 + 50;  // at most 4 samples in flight: m = 1 (8) cannot fit
  Json out = parseJson(planJson(plan(m)), "plan");
  const Json& best = member(out, "best", "");
  for (const char* key : {"microbatches", "microbatch_size", "k", "iteration_ms"}) EXPECT_TRUE(best.find(key)) << key;
  EXPECT_EQ(best.object.size(), 4u);
  const Json& cands = member(out, "candidates", "");
  ASSERT_EQ(cands.array.size(), divisors(8).size());
  bool sawInfeasible = false;
  for (const Json& c : cands.array) {
    EXPECT_EQ(c.object.size(), 7u);
    EXPECT_EQ(member(c, "peak_memory_bytes", "").array.size(), 2u);
    // max_k (seed 001's largest fitting K) bounds the chosen k; 0 only when infeasible.
    const double maxK = member(c, "max_k", "").number, k = member(c, "k", "").number;
    EXPECT_LE(k, maxK);
    EXPECT_EQ(maxK > 0, member(c, "feasible", "").boolean);
    sawInfeasible = sawInfeasible || !member(c, "feasible", "").boolean;
  }
  EXPECT_TRUE(sawInfeasible);
}

// ---- TicTac priorities -------------------------------------------------------------

Graph graphFrom(const std::string& json) { return parseGraph(parseJson(json, "graph.json")); }

std::string recv(const char* id, const char* param, double ms) {
  return std::string("{\"id\": \"") + id + "\", \"kind\": \"recv\", \"deps\": [], \"time_ms\": " +
         std::to_string(ms) + ", \"param\": \"" + param + "\", \"bytes\": 4096}";
}
std::string compute(const char* id, const std::string& deps, double ms) {
  return std::string("{\"id\": \"") + id + "\", \"kind\": \"compute\", \"deps\": [" + deps +
         "], \"time_ms\": " + std::to_string(ms) + "}";
}

// Layer l needs layer l-1's output and parameter w_l.
const std::string kChain = "{\"ops\": [" + recv("r0", "w0", 1) + "," + recv("r1", "w1", 1) + "," +
                           recv("r2", "w2", 1) + "," + recv("r3", "w3", 1) + "," + compute("c0", "\"r0\"", 1) +
                           "," + compute("c1", "\"c0\", \"r1\"", 1) + "," + compute("c2", "\"c1\", \"r2\"", 1) +
                           "," + compute("c3", "\"c2\", \"r3\"", 1) + "]}";

// Two branches: a's recv unblocks 1 ms of compute, b's 10 ms.
const std::string kCostFork = "{\"ops\": [" + recv("a", "A", 2) + "," + recv("b", "B", 2) + "," +
                              compute("ca", "\"a\"", 1) + "," + compute("cb", "\"b\"", 10) + "," +
                              compute("join", "\"ca\", \"cb\"", 1) + "]}";

// Branch a needs one recv (10 ms of compute), branch b two (1 ms).
const std::string kCountFork = "{\"ops\": [" + recv("a", "A", 1) + "," + recv("b1", "B1", 1) + "," +
                               recv("b2", "B2", 1) + "," + compute("ca", "\"a\"", 10) + "," +
                               compute("cb", "\"b1\", \"b2\"", 1) + "," + compute("join", "\"ca\", \"cb\"", 1) + "]}";

std::map<std::string, int> levels(const Priorities& p) {
  std::map<std::string, int> out;
  for (size_t i = 0; i < p.order.size(); ++i) out[p.order[i]] = p.level[i];
  return out;
}

TEST(PlannerPriority, ChainTicSharesTheFirstStepTacOrdersEveryOne) {
  Graph g = graphFrom(kChain);
  Priorities tic = assignPriorities(g, Policy::Tic);
  EXPECT_EQ(tic.order, (std::vector<std::string>{"w0", "w1", "w2", "w3"}));
  // M+: w0 and w1 unblock c1 together (2 transfers), w2 then needs 3, w3 4.
  EXPECT_EQ(levels(tic), (std::map<std::string, int>{{"w0", 0}, {"w1", 0}, {"w2", 2}, {"w3", 5}}));
  Priorities tac = assignPriorities(g, Policy::Tac);
  EXPECT_EQ(tac.order, (std::vector<std::string>{"w0", "w1", "w2", "w3"}));
  EXPECT_EQ(levels(tac), (std::map<std::string, int>{{"w0", 0}, {"w1", 2}, {"w2", 4}, {"w3", 6}}));
}

TEST(PlannerPriority, ForkTacOrdersByCostTicByCounts) {
  Graph cost = graphFrom(kCostFork);
  // TIC sees one recv per branch: a tie, one number, one level.
  EXPECT_EQ(levels(assignPriorities(cost, Policy::Tic)), (std::map<std::string, int>{{"A", 0}, {"B", 0}}));
  // TAC starts the 10 ms computation first (Johnson's rule).
  Priorities tac = assignPriorities(cost, Policy::Tac);
  EXPECT_EQ(tac.order, (std::vector<std::string>{"B", "A"}));
  EXPECT_LT(levels(tac)["B"], levels(tac)["A"]);

  Graph counts = graphFrom(kCountFork);
  // TIC: b1 + b2 unblock cb with 2 transfers, a only the join with 3.
  EXPECT_EQ(assignPriorities(counts, Policy::Tic).order, (std::vector<std::string>{"B1", "B2", "A"}));
  // TAC: a alone unblocks 10 ms of compute.
  EXPECT_EQ(assignPriorities(counts, Policy::Tac).order, (std::vector<std::string>{"A", "B1", "B2"}));
}

TEST(PlannerPriority, EfficiencyByHand) {
  Graph g = graphFrom(kCostFork);
  // U = 16 (all in a row); L = 13 (critical path b, cb, join).  b first:
  // b [0,2] a [2,4]; cb [2,12] ca [12,13] join [13,14] -> 14.  a first: 15.
  std::vector<int> bFirst = {1, 0, -1, -1, -1}, aFirst = {0, 1, -1, -1, -1};
  Efficiency e = efficiency(g, bFirst);
  EXPECT_DOUBLE_EQ(e.upperMs, 16);
  EXPECT_DOUBLE_EQ(e.lowerMs, 13);
  EXPECT_DOUBLE_EQ(e.makespanMs, 14);
  EXPECT_DOUBLE_EQ(e.efficiency, 2.0 / 3);
  EXPECT_DOUBLE_EQ(efficiency(g, aFirst).efficiency, 1.0 / 3);
  EXPECT_DOUBLE_EQ(efficiency(g, assignPriorities(g, Policy::Tac).recvNumber).efficiency, 2.0 / 3);
  const double random = randomOrderEfficiency(g, 64, 7);
  EXPECT_GT(random, 1.0 / 3);
  EXPECT_LT(random, 2.0 / 3);
}

TEST(PlannerPriority, ParameterWithTwoRecvsTakesTheMoreUrgent) {
  std::string g = kChain;
  g.insert(g.rfind(']'), "," + recv("r3b", "w0", 1) + "," + compute("c4", "\"c3\", \"r3b\"", 1));
  Priorities tac = assignPriorities(graphFrom(g), Policy::Tac);
  EXPECT_EQ(tac.order.size(), 4u);
  EXPECT_EQ(tac.order.front(), "w0");
}

TEST(PlannerPriority, BadGraphsAreNamed) {
  struct Case {
    std::string json, named;
  };
  const Case cases[] = {
      {"{\"ops\": []}", "ops must list at least one op"},
      {"{\"ops\": [" + compute("c", "", 1) + "]}", "no recv op"},
      {"{\"ops\": [" + recv("a", "A", 1) + "," + recv("a", "B", 1) + "]}", "ops[1].id \"a\" is already the id"},
      {"{\"ops\": [" + recv("a", "A", 1) + "," + compute("c", "\"zz\"", 1) + "]}", "ops[1].deps[0] names no op"},
      {"{\"ops\": [" + recv("a", "A", 1) + "," + compute("c", "\"d\"", 1) + "," + compute("d", "\"c\"", 1) + "]}",
       "cycle"},
      {"{\"ops\": [" + recv("a", "A", -1) + "]}", "ops[0].time_ms must not be negative"},
      {"{\"ops\": [{\"id\": \"a\", \"kind\": \"recv\", \"deps\": [], \"time_ms\": 1, \"param\": \"A\"}]}",
       "the field ops[0].bytes is missing"},
      {"{\"ops\": [{\"id\": \"a\", \"kind\": \"wait\", \"deps\": [], \"time_ms\": 1}]}", "ops[0].kind must be"},
  };
  for (const Case& c : cases)
    EXPECT_NE(errorOf([&] { graphFrom(c.json); }).find(c.named), std::string::npos)
        << c.named << " <- " << errorOf([&] { graphFrom(c.json); });
  EXPECT_NE(errorOf([] { parsePolicy("fifo"); }).find("tic or tac"), std::string::npos);
}

TEST(PlannerPriority, LevelsSpreadDistinctNumbersEvenly) {
  EXPECT_EQ(levelsOf({5, 7, 5, 9}), (std::vector<int>{0, 2, 0, 5}));  // 3 distinct: j * 8 / 3
  EXPECT_EQ(levelsOf({-4}), (std::vector<int>{0}));
  std::vector<int> many(20);
  for (int i = 0; i < 20; ++i) many[i] = 19 - i;
  const std::vector<int> level = levelsOf(many);
  EXPECT_EQ(level.front(), TERN_PRIORITY_LEVELS - 1);
  EXPECT_EQ(level.back(), 0);
  for (int i = 1; i < 20; ++i) EXPECT_LE(level[i], level[i - 1]);
}

// ---- the gantt chart (gantt.h) ------------------------------------------------------

struct Drawn {
  PipelineModel model;
  Candidate chosen;
  std::vector<TraceEvent> trace;
};

Drawn drawn(int64_t m, int64_t k) {
  Drawn d{pipeline(8, {stage(1, 2), stage(1.5, 2), stage(1, 3)}, 0.5, 20), {}, {}};
  d.chosen.microbatches = m;
  d.chosen.microbatchSize = 8 / m;
  d.chosen.k = k;
  d.chosen.iterationMs = simulate(d.model, m, k, &d.trace);
  return d;
}

TEST(PlannerGantt, ATraceReadBackDrawsThePlannersChart) {
  // What tern.gantt.draw does with planner.trace()'s JSON: the same picture.
  const Drawn d = drawn(4, 2);
  const Gantt back = parseGantt(parseJson(traceJson(d.model, d.chosen, d.trace), "trace"));
  EXPECT_EQ(back.events.size(), d.trace.size());
  EXPECT_EQ(ganttSvg(back), ganttSvg(plannedGantt(d.model, d.chosen, d.trace)));
}

TEST(PlannerGantt, ChartIsOnlyRectsLinesAndTextsWithTheirOwnLook) {
  // svg_to_png.py paints exactly these, one element at a time.
  const Drawn d = drawn(8, 8);
  Gantt g = plannedGantt(d.model, d.chosen, d.trace);
  g.title = "measured <batch 3> & more";
  const std::string svg = ganttSvg(g);
  EXPECT_EQ(svg.find("<style"), std::string::npos);
  EXPECT_EQ(svg.find("class="), std::string::npos);
  EXPECT_NE(svg.find("measured &lt;batch 3&gt; &amp; more"), std::string::npos);
  size_t elements = 0;
  for (size_t at = svg.find("\n<"); at != std::string::npos; at = svg.find("\n<", at + 1)) {
    const std::string tag = svg.substr(at + 2, svg.find_first_of(" >", at + 2) - at - 2);
    if (tag == "/svg") continue;
    EXPECT_TRUE(tag == "rect" || tag == "line" || tag == "text") << tag;
    ++elements;
  }
  EXPECT_GT(elements, d.trace.size());
}

TEST(PlannerGantt, BadTracesAreNamed) {
  const std::string head = R"({"title": "t", "stages": 2, "iteration_ms": 5, "events": [)";
  struct Case {
    std::string events, named;
  };
  const Case cases[] = {
      {R"({"kind": "gradient", "stage": 0, "micro": 0, "start_ms": 0, "end_ms": 1})",
       "events[0].stage must be from 1 to 1"},
      {R"({"kind": "activation", "stage": 1, "micro": 0, "start_ms": 0, "end_ms": 1})",
       "events[0].stage must be from 0 to 0"},
      {R"({"kind": "idle", "stage": 0, "micro": 0, "start_ms": 0, "end_ms": 1})", "events[0].kind must be forward"},
      {R"({"kind": "forward", "stage": 0, "micro": 0.5, "start_ms": 0, "end_ms": 1})",
       "events[0].micro must be a whole number"},
      {R"({"kind": "forward", "stage": 0, "micro": 0, "start_ms": 2, "end_ms": 1})",
       "events[0].end_ms must not come before start_ms"},
      {R"({"kind": "forward", "stage": 0, "micro": 0, "start_ms": 0})", "events[0].end_ms is missing"},
  };
  for (const Case& c : cases) {
    const std::string what = errorOf([&] { parseGantt(parseJson(head + c.events + "]}", "trace")); });
    EXPECT_NE(what.find(c.named), std::string::npos) << c.named << " <- " << what;
  }
}

// ---- the C ABI (tern_plan.h) ---------------------------------------------------------

struct AbiResult {
  int rc;
  std::string text;
};

template <typename F>
AbiResult abi(F f) {
  char* out = nullptr;
  const int rc = f(&out);
  AbiResult r{rc, out ? out : "(nothing)"};
  ternPlanFree(out);
  return r;
}

TEST(PlannerAbi, KfkbOrderAndLevelsAsJson) {
  AbiResult r = abi([](char** out) { return ternPlanKfkbOrder(3, 2, 2, 0, out); });
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.text, "[[\"F\", 0], [\"F\", 1], [\"F\", 2], [\"B\", 0], [\"B\", 1], [\"B\", 2]]\n");
  r = abi([](char** out) { return ternPlanLevels("[3, 1, 3]", out); });
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.text, "[4, 0, 4]\n");
  r = abi([](char** out) { return ternPlanLevels("[]", out); });
  EXPECT_EQ(r.text, "[]\n");
}

TEST(PlannerAbi, BadArgumentsReturnTwoWithASentence) {
  const std::pair<AbiResult, const char*> cases[] = {
      {abi([](char** out) { return ternPlanKfkbOrder(4, 5, 2, 0, out); }),
       "K must be between 1 and the micro-batch count 4, not 5."},
      {abi([](char** out) { return ternPlanKfkbOrder(4, 0, 2, 0, out); }),
       "K must be between 1 and the micro-batch count 4, not 0."},
      {abi([](char** out) { return ternPlanKfkbOrder(4, 1, 2, 2, out); }), "stage 2 is not one of 0..1."},
      {abi([](char** out) { return ternPlanLevels("[1, \"a\"]", out); }), "numbers[1] must be a number"},
      {abi([](char** out) { return ternPlanLevels("{}", out); }), "the numbers must be"},
      {abi([](char** out) { return ternPlanTraceSvg("{\"title\": \"t\"}", out); }), "stages is missing"},
      {abi([](char** out) { return ternPlanTraceSvg(nullptr, out); }), "no trace was given"},
  };
  for (const auto& [r, named] : cases) {
    EXPECT_EQ(r.rc, 2) << named;
    EXPECT_NE(r.text.find(named), std::string::npos) << named << " <- " << r.text;
  }
}

// ---- tern-plan ---------------------------------------------------------------------

struct CliRun {
  int status;
  std::string out;
};

// tern-plan's exit status and its stdout (and its stderr, unless `quiet`).
CliRun ternPlan(const std::string& args, bool quiet = false) {
  CliRun r{0, ""};
  FILE* f = popen((std::string(TERN_PLAN) + " " + args + (quiet ? " 2>/dev/null" : " 2>&1")).c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) r.out.append(buf, n);
  r.status = WEXITSTATUS(pclose(f));
  return r;
}

std::string writeTemp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(PlannerCli, InputErrorsExitTwoWithASentence) {
  std::string bad = kModel;
  bad.replace(bad.find("\"batch_size\": 8"), 15, "\"batch_size\": -8");
  struct Case {
    std::string args, named;
  };
  const Case cases[] = {
      {"schedule " + writeTemp("bad.json", bad), "batch_size must be positive"},
      {"schedule " + writeTemp("broken.json", "{\"batch_size\": 8,"), "is not valid JSON"},
      {"schedule " + writeTemp("ok.json", kModel) + " --microbatches 3", "does not divide batch_size 8"},
      {"schedule " + writeTemp("ok.json", kModel) + " --network-now -1", "--network-now must be a positive number"},
      {"schedule /nonexistent/model.json", "cannot read /nonexistent/model.json"},
      {"priorities " + writeTemp("g.json", kChain) + " --policy fifo", "the policy must be tic or tac"},
      {"priorities " + writeTemp("g.json", kChain) + " --gantt x.svg", "takes no option --gantt"},
  };
  for (const Case& c : cases) {
    CliRun r = ternPlan(c.args);
    EXPECT_EQ(r.status, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.named), std::string::npos) << c.args << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
  }
  EXPECT_EQ(ternPlan("").status, 2);
}

TEST(PlannerCli, ScheduleAndPrioritiesPrintDesignJson) {
  CliRun s = ternPlan("schedule " + writeTemp("ok.json", kModel) + " --network-now 0.5", true);
  ASSERT_EQ(s.status, 0) << s.out;
  PipelineModel m = modelFrom(kModel);
  overrideBandwidth(m, 0.5);
  EXPECT_EQ(s.out, planJson(plan(m)));
  CliRun p = ternPlan("priorities " + writeTemp("g.json", kCostFork) + " --policy tac", true);
  ASSERT_EQ(p.status, 0) << p.out;
  EXPECT_EQ(p.out, prioritiesJson(assignPriorities(graphFrom(kCostFork), Policy::Tac), Policy::Tac));
  EXPECT_NE(ternPlan("priorities " + writeTemp("g.json", kCostFork)).out.find("random_efficiency"), std::string::npos);
}

// tern-plan collectives: the issue's 512 hosts x 8 ranks over 10 Gbit/s at
// 64 MiB (the model's own tests: test_collective_model).
TEST(PlannerCli, CollectivesPredictsAndChooses) {
  CliRun r = ternPlan("collectives --hosts 512 --ranks-per-host 8 --net 10 --sizes 64M --ternary --json", true);
  ASSERT_EQ(r.status, 0) << r.out;
  const Json doc = parseJson(r.out, "the output");
  std::map<std::string, const Json*> byAlgo;
  for (const Json& p : member(doc, "predictions", "").array) byAlgo[member(p, "algorithm", "").string] = &p;
  ASSERT_TRUE(byAlgo.count("ternary") && byAlgo.count("ternary-twolevel")) << r.out;
  EXPECT_LT(member(*byAlgo["ternary-twolevel"], "time_us", "").number, member(*byAlgo["ternary"], "time_us", "").number);
  EXPECT_EQ(member(*byAlgo["ternary"], "bits", "").number, 14);
  EXPECT_EQ(member(*byAlgo["ternary-twolevel"], "bits", "").number, 11);
  EXPECT_EQ(member(member(member(doc, "choice", ""), "67108864", ""), "algorithm", "").string, "twolevel");
  // With codes up to 16 bits (a wider codec), the two-level ternary would run and win.
  CliRun w = ternPlan("collectives --hosts 512 --ranks-per-host 8 --net 10 --sizes 64M --ternary --max-bits 16", true);
  EXPECT_NE(w.out.find("   ternary-twolevel "), std::string::npos) << w.out;
  CliRun t = ternPlan("collectives --hosts 2 --ranks-per-host 3,1 --net 1gbit:20us --sizes 8,1K..4K,64M", true);
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("2 hosts (3+1) = 4 ranks"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("(20 us a step)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("    67108864     16777216"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("        4096         1024"), std::string::npos) << t.out;
  const std::string svg = ::testing::TempDir() + "collectives.svg";
  ASSERT_EQ(ternPlan("collectives --hosts 2 --ranks-per-host 2 --net 1 --sizes 8..64M --png " + svg, true).status, 0);
  std::ifstream in(svg);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first.rfind("<svg", 0), 0u) << first;
}

TEST(PlannerCli, CollectivesAndFitRefuseBadInputWithASentence) {
  const std::string model = writeTemp("m.json", "{\"format\": \"tern collective model\", \"version\": 1}");
  struct Case {
    std::string args, named;
  };
  const Case cases[] = {
      {"collectives --hosts 2 --net 1 --sizes 1M", "needs --ranks-per-host"},
      {"collectives --hosts 2 --ranks-per-host 2 --sizes 1M", "needs --net"},
      {"collectives --hosts 2 --ranks-per-host 2 --net fast --sizes 1M", "--net's rate \"fast\" is not a number"},
      {"collectives --hosts 2 --ranks-per-host 2,2,2 --net 1 --sizes 1M", "ranks_per_host lists 3 hosts, not 2"},
      {"collectives --hosts 2 --ranks-per-host 2 --net 1 --sizes 1M..1K", "must be whole bytes"},
      {"collectives --hosts 2 --ranks-per-host 2 --net 1 --sizes 1M --link shm", "link must be tcp or ucx"},
      {"collectives --hosts 4096 --ranks-per-host 512 --net 1 --sizes 1M", "at most 1048576 ranks, not 2097152"},
      {"collectives --hosts 2 --ranks-per-host 2 --sizes 1M --model " + model, "the field links is missing"},
      {"collectives --hosts 2 --ranks-per-host 2 --sizes 1M --model /nonexistent.json", "cannot read the model file"},
      {"fit " + writeTemp("ms.json", "{\"measurements\": [{\"algorithm\": \"ring\"}]}"),
       "the field measurements[0].link is missing"},
  };
  for (const Case& c : cases) {
    CliRun r = ternPlan(c.args);
    EXPECT_EQ(r.status, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.named), std::string::npos) << c.args << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
  }
}

TEST(PlannerCli, FitWritesAModelFile) {
  const std::string ms = writeTemp("fit.json", R"({"measurements": [
      {"algorithm": "ring", "link": "tcp", "hosts": 2, "ranks": 2, "bytes": 1048576, "time_us": 19000},
      {"algorithm": "ring", "link": "tcp", "hosts": 2, "ranks": 2, "bytes": 8192, "time_us": 190},
      {"algorithm": "ring", "link": "shm", "hosts": 1, "ranks": 2, "bytes": 1048576, "time_us": 100}]})");
  const std::string out = ::testing::TempDir() + "fitted.json";
  CliRun r = ternPlan("fit " + ms + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.out;
  CliRun c = ternPlan("collectives --hosts 2 --ranks-per-host 1 --sizes 1M --json --model " + out, true);
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_NE(c.out.find("fitted to 3 measurements"), std::string::npos) << c.out;
}

// tern-plan calibrate on a stand-in benchmark: an nccl-tests table whose
// times follow TERN_ALGO, which fails unless each forced algorithm runs with
// TERN_SMALL_THRESHOLD=0 (the small path's run keeps the threshold) and
// each ternary form is forced (ring: flat; twolevel).
TEST(PlannerCli, CalibrateTimesEachForcedAlgorithmAndFits) {
  const std::string bench = writeTemp("bench.sh", R"(case "$TERN_ALGO:$TERN_SMALL_THRESHOLD:$*" in
  rd::*) t=10 ;;
  rd:0:*) t=12 ;;
  ring:0:*) t=15 ;;
  twolevel:0:*) t=9 ;;
  ring::*"-T 1") t=5 ;;
  twolevel::*"-T 1") t=4 ;;
  *) exit 3 ;;
esac
echo "#       size         count      type   redop    root     time"
for b in 8 1024 65536 1048576; do
  echo "[0] $b $((b / 4)) float sum -1 $((t + b / 1000)).0 0.1 0.1 0 $((t + b / 1000)).5 0.1 0.1 0"
done
)");
  const std::string ms = ::testing::TempDir() + "calibrated_ms.json", out = ::testing::TempDir() + "calibrated.json";
  CliRun r = ternPlan("calibrate --hosts 2 --ranks 4 --ternary --measurements " + ms + " --out " + out + " -- sh " + bench);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream in(ms);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto rows = [&](const std::string& algo) {
    size_t n = 0;
    for (size_t at = 0; (at = text.find("\"algorithm\": \"" + algo + "\"", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  EXPECT_EQ(rows("small"), 4u) << text;  // 8 and 1024 B, out of place and in place
  EXPECT_EQ(rows("rd"), 8u);
  EXPECT_EQ(rows("ring"), 8u);
  EXPECT_EQ(rows("twolevel"), 8u);
  EXPECT_EQ(rows("ternary"), 4u);        // from 64 KiB, the flat form forced
  EXPECT_EQ(rows("ternary-twolevel"), 4u);  // 2 hosts of 2 ranks: the two-level form forced
  EXPECT_NE(text.find("\"link\": \"tcp\", \"hosts\": 2, \"ranks\": 4, \"bytes\": 1048576, \"time_us\": 1063.5"),
            std::string::npos) << text;
  EXPECT_NE(tern::model::loadModelFile(out).source.find("fitted to 36 measurements"), std::string::npos);
  CliRun bad = ternPlan("calibrate --hosts 2 --ranks 4 -- sh -c 'exit 3'");
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("the benchmark sh failed (status 3)"), std::string::npos) << bad.out;
}

}  // namespace
