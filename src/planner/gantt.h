// Pictures of a simulated kFkB schedule: stages down, time across; forward,
// backward and both transfer directions coloured, idle time (the bubble)
// left grey.  SVG is written here; PNG by tern/gantt.py (matplotlib) from
// the same trace, as JSON.
#pragma once

#include <string>
#include <vector>

#include "planner/schedule.h"

namespace tern::planner {

// The chosen candidate's schedule as a standalone SVG document.
std::string ganttSvg(const PipelineModel& model, const Candidate& chosen, const std::vector<TraceEvent>& trace);

// {"microbatches", "microbatch_size", "k", "iteration_ms", "stages", "events": [
//   {"kind": "forward"|"backward"|"activation"|"gradient", "stage", "micro", "start_ms", "end_ms"}]}
// (transfers: "stage" is the sender).
std::string traceJson(const PipelineModel& model, const Candidate& chosen, const std::vector<TraceEvent>& trace);

// The title both pictures carry.
std::string ganttTitle(const Candidate& chosen);

}  // namespace tern::planner
