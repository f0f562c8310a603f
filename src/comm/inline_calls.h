// The small path's calls: a blocking collective of a few KiB on an idle
// communicator runs on the caller's thread with no operation and no engine
// round (engine/inline_runner.cc), and hands over to the engine only when it
// must: an allreduce or barrier runs its recursive-doubling steps (no plan
// either); allgather, reduce-scatter, broadcast, reduce, gather, scatter and
// all-to-all run their plan (planPure), kept by the engine (engine/kept_plans.h).
// A group's small sends and receives on one communicator are recorded
// instead of made into operations (api/group.cc) and run at its end as
// transfers (transfersInline); a blocking one outside a group too.  The rest
// take the operation-based small path (ternComm::issueAlone).
// Whether a call runs inline at all is the engine's decision
// (engine/inline_choice.h, runsInline); this file only asks it, matches a
// call with the plan the engine keeps, and hands over.  The API only checks
// arguments and says at which level the caller waits (its thread's priority,
// outside a group).
#pragma once
#include "collectives/collectives.h"
#include "comm/comm.h"

namespace tern {

// A send or receive a group recorded instead of making its operation, and
// the priority level it was called at.
struct P2pCall {
  CollArgs a;
  int level;
};
// Whether a group may record this call (a small send or receive of host
// buffers from a named peer, the small path on).
bool mayRecord(const Comm* c, const CollArgs& a);
// The operation of a recorded call, as the call would have made it.
OpPtr recordedOp(Comm* c, const P2pCall& call);
// A group's recorded calls (at most kMaxTransfers, each (peer, direction,
// level) once) run on an idle engine as transfers without operations, all
// at once (Executor::runTransfersAlone); those the engine must finish are
// made into operations then, numbered as they were, and waited for.  False
// when it does not apply (nothing done: make their operations and issue them).
constexpr size_t kMaxTransfers = 16;
bool transfersInline(Comm* c, const P2pCall* calls, size_t n, ternResult_t* r);

// A blocking call outside a group, its caller waiting at `level`: false
// when the small path does not apply (nothing was done: launch as usual);
// else *r is the call's result.
bool callInline(Comm* c, const CollArgs& a, int level, ternResult_t* r);

}  // namespace tern
