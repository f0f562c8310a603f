// PreMulSum ops (tern.h, ternRedOpCreatePreMulSum): a communicator's user
// reduction ops, and how an operation that uses one is set up.
#pragma once
#include <string>

#include "collectives/collectives.h"
#include "comm/comm.h"
#include "engine/operation.h"

namespace tern {

// Whether `op` is one of c's live PreMulSum ops; *dt its datatype.
bool isPreMulSum(Comm* c, ternRedOp_t op, ternDataType_t* dt);

// Makes *args a sum over scaled inputs when args->op is a PreMulSum op:
// `op` gets the scaling (op.premul, run when it starts: engine/executor.cc)
// and its scaled input (host memory, or op.streamMem's scratch), which
// args->src then names.  An error with a sentence in *why when the op is
// gone or the scalar cannot be read from this operation's memory.
ternResult_t setUpPreMulSum(Comm* c, CollArgs* args, Operation& op, std::string* why);

}  // namespace tern
