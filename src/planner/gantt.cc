#include "planner/gantt.h"

#include <cmath>
#include <cstdio>

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

const char* kindName(TraceEvent::Kind k) {
  static const char* names[] = {"forward", "backward", "activation", "gradient"};
  return names[static_cast<int>(k)];
}

std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

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
  std::string out = fmt("<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"", x, y, w, h) + " fill=\"" +
                    kStyles[static_cast<int>(e.kind)].colour +
                    (w > 3 ? "\" stroke=\"white\" stroke-width=\"0.5\"/>\n" : "\"/>\n");
  if (compute && w >= 14)  // the micro-batch number, where it fits
    out += fmt("<text x=\"%.2f\" y=\"%.2f\" class=\"mb\">", x + w / 2, y + h / 2 + 4) + std::to_string(e.micro) +
           "</text>\n";
  return out;
}

std::string axis(double iterationMs, double scale, double bottom) {
  std::string out = fmt("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>\n", kLeft, bottom,
                        kLeft + iterationMs * scale, bottom);
  const double step = tickStep(iterationMs);
  for (double t = 0; t <= iterationMs * (1 + 1e-9); t += step) {
    const double x = kLeft + t * scale;
    out += fmt("<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#ccc\"/>\n", x, kTop - 4, x, bottom);
    out += fmt("<text x=\"%.2f\" y=\"%.2f\" class=\"tick\">%g</text>\n", x, bottom + 16, t);
  }
  out += fmt("<text x=\"%.2f\" y=\"%.2f\" class=\"label\">time (ms)</text>\n", kLeft + iterationMs * scale / 2,
             bottom + 34);
  return out;
}

std::string legend() {
  std::string out;
  double x = kLeft;
  for (const Style& st : kStyles) {
    out += fmt("<rect x=\"%.2f\" y=\"44\" width=\"14\" height=\"14\" fill=\"", x) + st.colour + "\"/>\n";
    out += fmt("<text x=\"%.2f\" y=\"56\" class=\"legend\">", x + 20) + st.name + "</text>\n";
    x += 40 + 8.0 * std::char_traits<char>::length(st.name);
  }
  out += fmt("<rect x=\"%.2f\" y=\"44\" width=\"14\" height=\"14\" fill=\"#e6e6e6\" stroke=\"#bbb\"/>\n", x);
  out += fmt("<text x=\"%.2f\" y=\"56\" class=\"legend\">idle (bubble)</text>\n", x + 20);
  return out;
}

}  // namespace

std::string ganttTitle(const Candidate& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "kFkB schedule: m = %lld micro-batches of %lld, K = %lld, iteration %.3f ms",
                static_cast<long long>(c.microbatches), static_cast<long long>(c.microbatchSize),
                static_cast<long long>(c.k), c.iterationMs);
  return buf;
}

std::string ganttSvg(const PipelineModel& model, const Candidate& chosen, const std::vector<TraceEvent>& trace) {
  const int p = static_cast<int>(model.stages.size());
  const double scale = (kWidth - kLeft - kRight) / chosen.iterationMs;
  const double bottom = stageTop(p - 1) + kStageH + 6, height = bottom + kAxisH + 8;
  std::string out = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n",
                        kWidth, height, kWidth, height);
  out += "<style>text{font-family:sans-serif;fill:#222}.title{font-size:17px;font-weight:bold}"
         ".legend,.stage{font-size:13px}.tick{font-size:11px;text-anchor:middle}.label{font-size:12px;"
         "text-anchor:middle}.mb{font-size:10px;fill:white;text-anchor:middle}.stage{text-anchor:end}</style>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"" + fmt("%.0f", kLeft) + "\" y=\"26\" class=\"title\">" + ganttTitle(chosen) + "</text>\n";
  out += legend();
  out += axis(chosen.iterationMs, scale, bottom);
  for (int s = 0; s < p; ++s) {
    out += fmt("<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#e6e6e6\"/>\n", kLeft, stageTop(s),
               chosen.iterationMs * scale, kStageH);
    out += fmt("<text x=\"%.2f\" y=\"%.2f\" class=\"stage\">stage ", kLeft - 8, stageTop(s) + kStageH / 2 + 5) +
           std::to_string(s) + "</text>\n";
  }
  for (const TraceEvent& e : trace) out += bar(e, scale);
  return out + "</svg>\n";
}

std::string traceJson(const PipelineModel& model, const Candidate& chosen, const std::vector<TraceEvent>& trace) {
  std::string out = "{\"title\": " + jsonString(ganttTitle(chosen)) + ", \"microbatches\": " +
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

}  // namespace tern::planner
