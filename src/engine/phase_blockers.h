// What holds a waiting phase up, for the engine's health checks
// (engine/health.cc): a peer that has gone, a descriptor on the other stream
// of a pair (a mismatch), and the peers it waits on, named in a timeout's sentence.
#pragma once
#include <string>

#include "engine/program.h"

namespace tern {

// A step blocked on a peer that has gone can never finish: that is the
// remote error (a peer that exits after its part is done is not one).
ternResult_t checkBlockedOnGone(const Phase& ph, int rank, const char* what);
// A peer's descriptor on the other stream of a pair we wait on (a size on
// the other side of the small-operation limit) is a mismatch.
ternResult_t checkOtherStream(const Operation& op, const Phase& ph);
// The peers the phase's unfinished programs wait on ("1, 3").
std::string blockedPeers(const Phase& ph);

}  // namespace tern
