// The small path at the API: a blocking collective of a few KiB on an idle
// communicator runs on the caller's thread with no operation and no engine
// round (engine/small_path.cc), and hands over to the engine only when it
// must: an allreduce or barrier runs its recursive-doubling steps (no plan
// either); allgather, reduce-scatter, broadcast, reduce, gather, scatter and
// all-to-all run their plan (planPure) from scratch the communicator keeps.
// Groups (a sendrecv) and the rest take the operation-based small path
// (ternComm::issueAlone, api/group.cc).
#pragma once
#include <memory>

#include "collectives/collectives.h"
#include "comm/comm.h"

namespace tern {

// What the API makes of a call (api.cc): its descriptor at `level`, and its
// operation (level, descriptor and task).
OpDesc callDesc(const Comm* c, const CollArgs& args, int level);
void makeOp(Comm* c, const OpPtr& op, const CollArgs& args, std::unique_ptr<Task> task);

// False when the small path does not apply (nothing was done: launch as
// usual); else *r is the call's result.
bool callAlone(Comm* c, const CollArgs& a, ternResult_t* r);

}  // namespace tern
