// The cost model's file (what TERN_MODEL_FILE and `tern-plan collectives
// --model` load, what `tern-plan fit` writes) and the measurements a fit
// reads, as JSON.  docs/PLANNERS.md shows both.  Strict as the planners'
// inputs are (base/json.h): a misspelt or missing field, a negative
// figure or another file's format is refused with one sentence naming it.
#pragma once

#include <string>
#include <vector>

#include "model/collective_model.h"

namespace tern::model {

// The file's text: {"format": "tern collective model", "version": 1,
// "source": ..., "links": {"shm"|"tcp"|"ucx": {"latency_us",
// "small_latency_us", "ns_per_byte", "ns_per_reduced_byte"}}, "codec":
// {"ns_per_byte"}}.
std::string modelJson(const Model& m);

// The model in `text`; `what` names it in errors ("the model file m.json").
// Throws planner::InputError.
Model parseModel(const std::string& text, const std::string& what);

// Reads and parses the file at `path` (errors name the path).
Model loadModelFile(const std::string& path);

// {"measurements": [{"algorithm", "link", "hosts", "ranks" (spread over the
// hosts as evenly as can be) or "ranks_per_host": [..], "bytes",
// "dtype_bytes" (default 4), "time_us"}]}.  Throws planner::InputError.
std::vector<Measurement> parseMeasurements(const std::string& text, const std::string& what);

}  // namespace tern::model
