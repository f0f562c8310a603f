// The small path at the API: a blocking collective of a few KiB on an idle
// communicator runs on the caller's thread with no operation and no engine
// round (engine/inline_runner.cc), and hands over to the engine only when it
// must: an allreduce or barrier runs its recursive-doubling steps (no plan
// either); allgather, reduce-scatter, broadcast, reduce, gather, scatter and
// all-to-all run their plan (planPure), kept by the engine (engine/kept_plans.h).
// A group's small sends and receives on one communicator are recorded
// instead of made into operations (api/group.cc) and run at its end as
// transfers (transfersAlone); a blocking one outside a group too.  The rest
// take the operation-based small path (ternComm::issueAlone, api/group.cc).
// Whether a call runs inline at all is the engine's decision
// (engine/inline_choice.h, runsInline); this layer only asks it.
#pragma once
#include <memory>

#include "collectives/collectives.h"
#include "comm/comm.h"

namespace tern {

// What the API makes of a call (api.cc): its descriptor at `level`, and its
// operation (level, descriptor and task).
OpDesc callDesc(const Comm* c, const CollArgs& args, int level);
void makeOp(Comm* c, const OpPtr& op, const CollArgs& args, std::unique_ptr<Task> task, int level);

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
bool transfersAlone(Comm* c, const P2pCall* calls, size_t n, ternResult_t* r);

// False when the small path does not apply (nothing was done: launch as
// usual); else *r is the call's result.
bool callAlone(Comm* c, const CollArgs& a, ternResult_t* r);

}  // namespace tern
