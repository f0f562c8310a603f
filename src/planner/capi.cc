// The C ABI of tern_plan.h over the planners' C++ code: exceptions become a
// return code and a sentence.
#include "planner/tern_plan.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/model_file.h"
#include "planner/collectives.h"
#include "planner/gantt.h"
#include "planner/kfkb.h"
#include "planner/priority.h"
#include "planner/schedule.h"

#define TERN_PLAN_API extern "C" __attribute__((visibility("default")))

namespace tern::planner {
namespace {

char* copyOut(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

int guarded(char** out, const std::function<std::string()>& body) {
  if (!out) return 1;
  int rc = 0;
  std::string text;
  try {
    text = body();
  } catch (const InputError& e) {
    rc = 2;
    text = e.what();
  } catch (const std::invalid_argument& e) {  // the cost model's word for an unusable input
    rc = 2;
    text = e.what();
  } catch (const std::exception& e) {
    rc = 1;
    text = std::string("the planner failed: ") + e.what() + ".";
  }
  *out = copyOut(text);
  return *out ? rc : 1;
}

std::string need(const char* text, const char* what) {
  if (!text) throw InputError(std::string("no ") + what + " was given.");
  return text;
}

PipelineModel readModel(const char* json, double bandwidthGbps) {
  PipelineModel model = parseModel(parseJson(need(json, "model"), "the model"));
  if (bandwidthGbps != 0) overrideBandwidth(model, bandwidthGbps);
  return model;
}

// "[a, b, ...]\n", each item written by `write`.
template <typename T, typename Write>
std::string jsonList(const std::vector<T>& items, Write write) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + write(items[i]);
  return out + "]\n";
}

Candidate chosenCandidate(const PipelineModel& model, long long m, long long k) {
  if (k == 0) {
    Plan p = plan(model, m);
    if (p.best < 0) throw std::runtime_error("no split of the batch fits every stage's memory");
    return p.candidates[p.best];
  }
  if (m <= 0 || model.batchSize % m != 0 || k < 1 || k > m)
    throw InputError("the gantt needs a micro-batch count dividing batch_size and 1 <= k <= it.");
  Candidate c;
  c.microbatches = m;
  c.microbatchSize = model.batchSize / m;
  c.k = k;
  c.maxK = largestFittingK(model, m);
  c.feasible = k <= c.maxK;
  c.iterationMs = simulate(model, m, k);
  return c;
}

}  // namespace
}  // namespace tern::planner

using namespace tern;
using namespace tern::planner;

TERN_PLAN_API int ternPlanSchedule(const char* model_json, double bandwidth_gbps, long long microbatches,
                                   char** out) {
  return guarded(out, [&] { return planJson(plan(readModel(model_json, bandwidth_gbps), microbatches)); });
}

TERN_PLAN_API int ternPlanGantt(const char* model_json, double bandwidth_gbps, long long microbatches, long long k,
                                int format, char** out) {
  return guarded(out, [&] {
    PipelineModel model = readModel(model_json, bandwidth_gbps);
    Candidate c = chosenCandidate(model, microbatches, k);
    std::vector<TraceEvent> trace;
    simulate(model, c.microbatches, c.k, &trace);
    return format == 1 ? ganttSvg(plannedGantt(model, c, std::move(trace))) : traceJson(model, c, trace);
  });
}

TERN_PLAN_API int ternPlanTraceSvg(const char* trace_json, char** out) {
  return guarded(out, [&] { return ganttSvg(parseGantt(parseJson(need(trace_json, "trace"), "the trace"))); });
}

TERN_PLAN_API int ternPlanKfkbOrder(long long m, long long k, long long stages, long long stage, char** out) {
  return guarded(out, [&] {
    if (k < 1 || k > m)
      throw InputError("K must be between 1 and the micro-batch count " + std::to_string(m) + ", not " +
                       std::to_string(k) + ".");
    if (stage < 0 || stage >= stages || stages > INT_MAX)
      throw InputError("stage " + std::to_string(stage) + " is not one of 0.." + std::to_string(stages - 1) + ".");
    return jsonList(kfkbOrder(m, k, static_cast<int>(stages), static_cast<int>(stage)), [](const KfkbOp& op) {
      return std::string(op.forward ? "[\"F\", " : "[\"B\", ") + std::to_string(op.micro) + "]";
    });
  });
}

TERN_PLAN_API int ternPlanLevels(const char* numbers_json, char** out) {
  return guarded(out, [&] {
    const Json doc = parseJson(need(numbers_json, "numbers"), "the numbers");
    const std::vector<Json>& items = expectArray(doc, "the numbers").array;
    std::vector<int> numbers;
    for (size_t i = 0; i < items.size(); ++i)
      numbers.push_back(static_cast<int>(expectIntegerIn(items[i], indexPath("numbers", i), INT_MIN, INT_MAX)));
    return jsonList(levelsOf(numbers), [](int level) { return std::to_string(level); });
  });
}

TERN_PLAN_API int ternPlanPriorities(const char* graph_json, const char* policy, char** out) {
  return guarded(out, [&] {
    Policy pol = parsePolicy(need(policy, "policy"));
    return prioritiesJson(assignPriorities(parseGraph(parseJson(need(graph_json, "graph"), "the graph")), pol), pol);
  });
}

TERN_PLAN_API int ternPlanEfficiency(const char* graph_json, const char* policy, int samples,
                                     unsigned long long seed, char** out) {
  return guarded(out, [&] {
    Policy pol = parsePolicy(need(policy, "policy"));
    if (samples < 1) throw InputError("the number of random orders must be positive.");
    Graph g = parseGraph(parseJson(need(graph_json, "graph"), "the graph"));
    Efficiency e = efficiency(g, assignPriorities(g, pol).recvNumber);
    return std::string("{\"policy\": ") + jsonString(policyName(pol)) + ", \"efficiency\": " +
           jsonNumber(e.efficiency) + ", \"makespan_ms\": " + jsonNumber(e.makespanMs) +
           ", \"lower_ms\": " + jsonNumber(e.lowerMs) + ", \"upper_ms\": " + jsonNumber(e.upperMs) +
           ", \"random_efficiency\": " + jsonNumber(randomOrderEfficiency(g, samples, seed)) + "}\n";
  });
}

TERN_PLAN_API void ternPlanFree(char* text) { std::free(text); }

namespace {

tern::model::Model modelAt(const char* path) {
  return path ? tern::model::loadModelFile(path) : tern::model::defaultModel();
}

}  // namespace

TERN_PLAN_API int ternPlanCollectives(const char* query_json, const char* model_path, int format, char** out) {
  return guarded(out, [&] {
    const CollectivesQuery q = parseCollectivesQuery(parseJson(need(query_json, "query"), "the query"));
    const tern::model::Model m = modelAt(model_path);
    if (format == 1) return collectivesTable(q, m);
    if (format == 2) return collectivesSvg(q, m);
    return collectivesJson(q, m);
  });
}

TERN_PLAN_API int ternPlanFitModel(const char* measurements_json, const char* model_path, char** out) {
  return guarded(out, [&] {
    const auto ms = tern::model::parseMeasurements(need(measurements_json, "measurements"), "the measurement list");
    return tern::model::modelJson(tern::model::fit(ms, modelAt(model_path)).model);
  });
}
