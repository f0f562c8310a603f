// The collectives' simulator (`tern-plan collectives`, ternPlanCollectives):
// every allreduce algorithm's predicted time at each size for a host layout
// and a network, from the cost model of src/model/, and the one the model
// picks.  docs/PLANNERS.md, "The collectives' cost model and simulator".
#pragma once

#include <string>
#include <vector>

#include "model/collective_model.h"
#include "base/json.h"

namespace tern::planner {

struct CollectivesQuery {
  model::Layout layout;
  std::vector<double> sizes;  // bytes
  bool ternary = false;
  model::Link net = model::Link::Tcp;
  double gbps = 0;            // > 0: the network's wire rate (model::setNetwork)
  double latencyUs = -1;      // >= 0: its per-step latency
  int dtypeBytes = 4;
  model::Limits limits;
};

// {"hosts": H, "ranks_per_host": L or [L0, L1, ...], "sizes": [bytes, ...],
//  optional "ternary", "link" ("tcp"|"ucx"), "gbps", "latency_us",
//  "dtype_bytes", "small_bytes", "ternary_min_bytes", "max_bits"}.
CollectivesQuery parseCollectivesQuery(const Json& doc);

// {"hosts", "ranks", "ranks_per_host", "link", "dtype_bytes", "model",
//  "predictions": [{"algorithm", "bytes", "ternary", "time_us", "bits",
//  "runnable", ("why")}], "choice": {"<bytes>": {"algorithm", "time_us", "bits"}}}.
// Algorithms that do not apply (two-level on one host) are left out.
std::string collectivesJson(const CollectivesQuery& q, const model::Model& m);
// The same as a table in nccl-tests' manner, one row per size.
std::string collectivesTable(const CollectivesQuery& q, const model::Model& m);
// A chart: predicted time against size, one line per algorithm, the choice marked.
std::string collectivesSvg(const CollectivesQuery& q, const model::Model& m);

}  // namespace tern::planner
