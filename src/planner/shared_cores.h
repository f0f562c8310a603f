// The kFkB simulation when the stages share fewer cores than there are
// stages (schedule.h, PipelineModel::cores): a CPU pipeline whose stage
// processes sit on one host.  Kept apart from the dedicated simulation in
// schedule.cc, whose per-stage sweep is what makes the exhaustive search
// fast: with shared cores an operation's duration depends on what the other
// stages do at the same moment, so this one advances all stages in time
// order instead.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/schedule.h"

namespace tern::planner {

// simulate() for model.cores < stages: the stages with an operation whose
// input has arrived share the cores equally, each at most one core
// (processor sharing), with the background load of every stage that has
// operations left (Stage::backgroundCores) competing for them too;
// transfers occupy the links as in the dedicated model and take no core.
double simulateSharedCores(const PipelineModel& model, int64_t m, int64_t k, std::vector<TraceEvent>* trace);

}  // namespace tern::planner
