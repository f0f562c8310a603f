// The gantt chart of a pipeline schedule, simulated by the planner or
// measured by the pipeline runtime: stages down, time across; forward,
// backward and both transfer directions coloured, idle time (the bubble)
// left grey.  This is tern's one renderer of it: tern-plan and tern.planner
// write its SVG as it is, and their PNG is that SVG painted by matplotlib
// (svg_to_png.py), so the two formats cannot drift apart.
#pragma once

#include <string>
#include <vector>

#include "base/json.h"
#include "planner/schedule.h"

namespace tern::planner {

// What a chart shows.  Events past iterationMs are drawn past the axis.
struct Gantt {
  std::string title;
  int stages = 0;
  double iterationMs = 0;
  std::vector<TraceEvent> events;
};

// The chosen candidate's simulated schedule, titled with its (m, K).
Gantt plannedGantt(const PipelineModel& model, const Candidate& chosen, std::vector<TraceEvent> trace);

// A standalone SVG document of only <rect>, <line> and <text> elements
// directly under <svg>, each carrying its look in attributes (no CSS), so
// svg_to_png.py can paint every element on its own.
std::string ganttSvg(const Gantt& gantt);

// {"title", "microbatches", "microbatch_size", "k", "iteration_ms", "stages", "events": [
//   {"kind": "forward"|"backward"|"activation"|"gradient", "stage", "micro", "start_ms", "end_ms"}]}
// (transfers: "stage" is the sender).
std::string traceJson(const PipelineModel& model, const Candidate& chosen, const std::vector<TraceEvent>& trace);

// traceJson's format read back, or a measured trace in it (microbatches,
// microbatch_size and k optional): InputError naming the field.
Gantt parseGantt(const Json& doc);

}  // namespace tern::planner
