// ternConfig_t: the options a caller passes to ternCommInitRankConfig,
// resolved over the environment (a field left unset keeps the variable's
// value or the default).
#pragma once
#include "base/env.h"
#include "tern/tern.h"
#include "transport/transport.h"

#include <array>
#include <string>
#include <vector>

namespace tern {

// Applies `user` (may be NULL) to cfg, whose ternary options come from
// TERN_TERNARY_* first, and rounds the fifo size so that every ternary code
// width used with `nranks` ranks divides it.  An older, smaller struct is
// accepted (the fields it lacks stay unset); a bad magic, a size too small
// to hold the header or a value out of range is ternInvalidArgument with a
// sentence naming the field or variable; so is a malformed number in any
// TERN_* variable (Config::malformedEnv).
ternResult_t resolveConfig(const ternConfig_t* user, int nranks, Config* cfg);
// Ternary defaults, overridden by TERN_TERNARY_SEED / _BLOCK / _CLIP / _EF / _MIN_BYTES;
// the first malformed one is described in *malformed.
ternTernaryConfig_t ternaryConfigFromEnv(std::string* malformed);
// nullptr when valid, else why not.
const char* ternaryConfigProblem(const ternTernaryConfig_t& cfg);
// The flow class (0 = most urgent) a priority level travels in.
int flowClassOf(int level, int flowClasses);
// Flow classes and their DSCP: defaults, TERN_FLOW_CLASSES / TERN_FLOW_DSCP,
// then the struct's fields (u may be NULL).  Bad values (out of range, a
// DSCP list whose count is not the class count, garbage) are
// ternInvalidArgument with a sentence.
ternResult_t resolveFlows(const ternConfig_t* u, Config* cfg);
// How a level's packets are marked (transport/transport.h, FlowMark).
FlowMark flowMarkOf(const Config& cfg, int level);
int flowSoPriority(int flowClass, int flowClasses);
// flowClassOf for every level under cfg's class count.
std::array<int, TERN_PRIORITY_LEVELS> flowClassTable(const Config& cfg);
// One line for the INFO log: each class's levels, DSCP and SO_PRIORITY.
std::string describeFlows(const Config& cfg);

// TERN_ALGO's values, in the order of their codes (a rank publishes its code
// in the bootstrap exchange, comm/bootstrap.h PeerInfo::algo).
constexpr const char* kAlgoNames[] = {"auto", "ring", "rd", "twolevel"};
// The code of a TERN_ALGO value (-1: not one of them).
int algoCode(const std::string& name);
// Every rank must plan an allreduce alike, so every rank's TERN_ALGO (codes[r]
// is rank r's) must be the same: else ternInvalidUsage, naming a rank that
// differs from rank 0.
// The same for the cost model auto asks (hashes[r]: rank r's, 0 for none).
ternResult_t agreeAlgo(const std::vector<uint32_t>& codes, const std::vector<uint64_t>& hashes);

}  // namespace tern
