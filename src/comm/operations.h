// What a call becomes on a communicator, and waiting for it: the descriptor
// every rank checks (callDesc), the operation the engine runs (makeOp), and
// the wait for issued operations that records their failures (waitAll).
// The API builds its calls' operations with these; so does the inline
// runner's hand-over (comm/inline_calls.cc) when the engine must finish a
// call that began on the caller's thread.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "collectives/collectives.h"
#include "comm/comm.h"

namespace tern {

// A call's descriptor at priority `level` (its sequence number is the
// issuer's: Comm::issue, claimAlone).
OpDesc callDesc(const Comm* c, const CollArgs& args, int level);
// The operation of a call: its level, peer, descriptor and task (`task`
// when the caller brings its own, else the collective's plan).
void makeOp(Comm* c, const OpPtr& op, const CollArgs& args, std::unique_ptr<Task> task, int level);

using IssuedOps = std::vector<std::pair<Comm*, OpPtr>>;
// Waits for issued operations: the first failure's code, the last failing
// one's sentence recorded as the calling thread's (base/error.h).
// hostOnly: not the operations on a stream (nobody waits for those).
ternResult_t waitAll(const IssuedOps& ops, bool hostOnly = false);

}  // namespace tern
