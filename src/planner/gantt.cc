#include "planner/gantt.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <utility>

#include "planner/svg.h"

namespace tern::planner {
namespace {

// Geometry (pixels): a row per stage, a thinner lane per link between them
// (activations in its upper half, gradients in its lower half).
constexpr double kWidth = 1200, kLeft = 96, kRight = 24, kTop = 78, kStageH = 30, kLinkH = 16, kAxisH = 40;

struct Style {
  const char* name;
  const char* colour;
};
const Style kStyles[] = {{"forward", "#4c78a8"}, {"backward", "#f58518"},
                         {"activation transfer", "#54a24b"}, {"gradient transfer", "#b279a2"}};

const char* const kKindNames[] = {"forward", "backward", "activation", "gradient"};  // by TraceEvent::Kind

const char* kindName(TraceEvent::Kind k) { return kKindNames[static_cast<int>(k)]; }

using svg::fmt;
using svg::line;
using svg::rect;
using svg::text;

double stageTop(int s) { return kTop + s * (kStageH + kLinkH); }

// A round step for about 10 axis ticks: 1, 2 or 5 times a power of ten.
double tickStep(double span) {
  const double raw = span / 10, power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0})
    if (f * power >= raw) return f * power;
  return 10 * power;
}

std::string bar(const TraceEvent& e, double scale) {
  const bool compute = e.kind == TraceEvent::Kind::Forward || e.kind == TraceEvent::Kind::Backward;
  double y = compute ? stageTop(e.stage) + 2 : stageTop(e.stage) + kStageH + 1;
  const double h = compute ? kStageH - 4 : kLinkH / 2 - 1;
  if (e.kind == TraceEvent::Kind::GradientSend) y = stageTop(e.stage - 1) + kStageH + kLinkH / 2;
  const double x = kLeft + e.startMs * scale, w = std::max((e.endMs - e.startMs) * scale, 0.5);
  // A white outline separates neighbouring bars; on a sliver it would hide the colour.
  std::string out = rect(x, y, w, h, kStyles[static_cast<int>(e.kind)].colour,
                         w > 3 ? " stroke=\"white\" stroke-width=\"0.5\"" : "");
  if (compute && w >= 14)  // the micro-batch number, where it fits
    out += text(x + w / 2, y + h / 2 + 4, 10, "middle", std::to_string(e.micro), " fill=\"white\"");
  return out;
}

std::string axis(double iterationMs, double scale, double bottom) {
  std::string out = line(kLeft, bottom, kLeft + iterationMs * scale, bottom, "#444");
  const double step = tickStep(iterationMs);
  for (double t = 0; t <= iterationMs * (1 + 1e-9); t += step) {
    const double x = kLeft + t * scale;
    out += line(x, kTop - 4, x, bottom, "#ccc");
    out += text(x, bottom + 16, 11, "middle", fmt("%g", t));
  }
  return out + text(kLeft + iterationMs * scale / 2, bottom + 34, 12, "middle", "time (ms)");
}

std::string legend() {
  std::string out;
  double x = kLeft;
  for (const Style& st : kStyles) {
    out += rect(x, 44, 14, 14, st.colour) + text(x + 20, 56, 13, "start", st.name);
    x += 40 + 8.0 * std::char_traits<char>::length(st.name);
  }
  return out + rect(x, 44, 14, 14, "#e6e6e6", " stroke=\"#bbb\"") + text(x + 20, 56, 13, "start", "idle (bubble)");
}

std::string plannedTitle(const Candidate& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "kFkB schedule: m = %lld micro-batches of %lld, K = %lld, iteration %.3f ms",
                static_cast<long long>(c.microbatches), static_cast<long long>(c.microbatchSize),
                static_cast<long long>(c.k), c.iterationMs);
  return buf;
}

TraceEvent::Kind parseKind(const Json& v, const std::string& path) {
  const std::string& name = expectString(v, path);
  for (size_t k = 0; k < std::size(kKindNames); ++k)
    if (name == kKindNames[k]) return static_cast<TraceEvent::Kind>(k);
  throw InputError(path + " must be forward, backward, activation or gradient, not \"" + name + "\".");
}

// A transfer's "stage" is its sender: activations go down from 0..p-2, gradients up from 1..p-1.
TraceEvent parseEvent(const Json& v, const std::string& path, int stages) {
  expectOnlyFields(v, {"kind", "stage", "micro", "start_ms", "end_ms"}, path);
  TraceEvent e{};
  e.kind = parseKind(member(v, "kind", path), fieldPath(path, "kind"));
  const int lowest = e.kind == TraceEvent::Kind::GradientSend ? 1 : 0;
  const int highest = e.kind == TraceEvent::Kind::ActivationSend ? stages - 2 : stages - 1;
  e.stage = static_cast<int>(expectIntegerIn(member(v, "stage", path), fieldPath(path, "stage"), lowest, highest));
  e.micro = expectIntegerIn(member(v, "micro", path), fieldPath(path, "micro"), 0, INT64_MAX);
  e.startMs = expectNonNegative(member(v, "start_ms", path), fieldPath(path, "start_ms"));
  e.endMs = expectNonNegative(member(v, "end_ms", path), fieldPath(path, "end_ms"));
  if (e.endMs < e.startMs) throw InputError(fieldPath(path, "end_ms") + " must not come before start_ms.");
  return e;
}

}  // namespace

Gantt plannedGantt(const PipelineModel& model, const Candidate& chosen, std::vector<TraceEvent> trace) {
  return Gantt{plannedTitle(chosen), static_cast<int>(model.stages.size()), chosen.iterationMs, std::move(trace)};
}

std::string ganttSvg(const Gantt& g) {
  const double scale = (kWidth - kLeft - kRight) / g.iterationMs;
  const double bottom = stageTop(g.stages - 1) + kStageH + 6, height = bottom + kAxisH + 8;
  std::string out = text(kLeft, 26, 17, "start", g.title, " font-weight=\"bold\" fill=\"#222\"");
  out += legend();
  out += axis(g.iterationMs, scale, bottom);
  for (int s = 0; s < g.stages; ++s) {
    out += rect(kLeft, stageTop(s), g.iterationMs * scale, kStageH, "#e6e6e6");
    out += text(kLeft - 8, stageTop(s) + kStageH / 2 + 5, 13, "end", "stage " + std::to_string(s));
  }
  for (const TraceEvent& e : g.events) out += bar(e, scale);
  return svg::document(kWidth, height, out);
}

std::string traceJson(const PipelineModel& model, const Candidate& chosen, const std::vector<TraceEvent>& trace) {
  std::string out = "{\"title\": " + jsonString(plannedTitle(chosen)) + ", \"microbatches\": " +
                    jsonNumber(chosen.microbatches) + ", \"microbatch_size\": " + jsonNumber(chosen.microbatchSize) +
                    ", \"k\": " + jsonNumber(chosen.k) + ", \"iteration_ms\": " + jsonNumber(chosen.iterationMs) +
                    ", \"stages\": " + std::to_string(model.stages.size()) + ", \"events\": [";
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEvent& e = trace[i];
    out += (i ? ",\n  {\"kind\": \"" : "\n  {\"kind\": \"") + std::string(kindName(e.kind)) +
           "\", \"stage\": " + std::to_string(e.stage) + ", \"micro\": " + std::to_string(e.micro) +
           ", \"start_ms\": " + jsonNumber(e.startMs) + ", \"end_ms\": " + jsonNumber(e.endMs) + "}";
  }
  return out + "\n]}\n";
}

Gantt parseGantt(const Json& doc) {
  expectOnlyFields(doc, {"title", "microbatches", "microbatch_size", "k", "iteration_ms", "stages", "events"}, "");
  Gantt g;
  g.title = expectString(member(doc, "title", ""), "title");
  g.stages = static_cast<int>(expectIntegerIn(member(doc, "stages", ""), "stages", 1, INT32_MAX));
  g.iterationMs = expectPositive(member(doc, "iteration_ms", ""), "iteration_ms");
  const Json& events = expectArray(member(doc, "events", ""), "events");
  for (size_t i = 0; i < events.array.size(); ++i)
    g.events.push_back(parseEvent(events.array[i], indexPath("events", i), g.stages));
  return g;
}

}  // namespace tern::planner
