// Parameter priorities from the computation graph (docs/DESIGN.md,
// "Priorities from the computation graph").
//
// The next iteration's computation waits for parameters to arrive (recv ops);
// the order they are sent in decides how soon computation can start.  TIC
// orders them by how few transfers unblock a computation; TAC by Johnson's
// rule over transfer time and the compute time each one unblocks.  The order
// becomes tern's TERN_PRIORITY_LEVELS priority levels (0 = most urgent).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"

namespace tern::planner {

struct GraphOp {
  enum class Kind { Compute, Recv, Send };
  std::string id;
  Kind kind = Kind::Compute;
  std::vector<int> deps;  // indices of the ops it waits for
  double timeMs = 0;
  std::string param;      // recv/send only
  double bytes = 0;       // recv/send only
};

struct Graph {
  std::vector<GraphOp> ops;  // in the file's order; deps refer to earlier or later ops, no cycles
};

// Reads docs/DESIGN.md's graph.json {"ops": [...]}; throws InputError naming the field.
Graph parseGraph(const Json& doc);

enum class Policy { Tic, Tac };
Policy parsePolicy(const std::string& name);  // "tic" | "tac", else InputError
const char* policyName(Policy policy);

struct Priorities {
  std::vector<int> recvNumber;      // per op: TicTac's number for recvs (ties share), -1 for others
  std::vector<std::string> order;   // parameters, most urgent first
  std::vector<int> level;           // per entry of `order`: levelsOf its number
};

// TicTac's ordering (the rules at the end of docs/DESIGN.md's TicTac section),
// then the numbers mapped onto the levels (levelsOf).  A parameter with several recvs
// takes its most urgent number.
Priorities assignPriorities(const Graph& graph, Policy policy);
// Numbers (lower: more urgent) onto levels: the distinct numbers spread evenly
// over 0..TERN_PRIORITY_LEVELS - 1, the smallest at 0.  Also what
// tern.torch.PriorityScheduler's "layer" policy maps layer order with
// (ternPlanLevels).
std::vector<int> levelsOf(const std::vector<int>& numbers);
std::string prioritiesJson(const Priorities& priorities, Policy policy);

// TicTac's scheduling efficiency of one iteration executed with recvs sent in
// the order of `recvNumber` (lower first; ties in graph order): one compute
// device, one incoming link for recvs, one outgoing link for sends, each
// running one op at a time (compute ops in graph order as they become ready).
// E = (U - makespan) / (U - L): U runs everything one after another, L is the
// longest of the total compute, total recv, total send and the critical path.
struct Efficiency {
  double makespanMs = 0, upperMs = 0, lowerMs = 0, efficiency = 1;
};
Efficiency efficiency(const Graph& graph, const std::vector<int>& recvNumber);
// The mean efficiency over `samples` random recv orders (seeded: repeatable).
double randomOrderEfficiency(const Graph& graph, int samples, uint64_t seed);

}  // namespace tern::planner
