// A weight stream's operations (stream_tasks.cc): the sender's, admitted
// while it has versions to move, and the receiver's standing one.
#pragma once
#include <memory>

#include "engine/executor.h"
#include "streaming/stream_state.h"

namespace tern {

// An unordered operation of the stream's kind at its level, with the task of
// this rank's side (sender or receiver), from the executor's pool.
OpPtr makeStreamOp(Executor& engine, const std::shared_ptr<StreamState>& s, int rank);

}  // namespace tern
