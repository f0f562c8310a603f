// advance: how a program moves.  The executor (stepper.cc) decides which
// operation's programs advance; advance() moves one program as far as its
// fifos and a byte budget allow, then returns, so the executor can serve a
// more urgent operation at the next chunk boundary.
#pragma once
#include "engine/program.h"

namespace tern {

// Moves program `p` of operation `op` as far as the fifos allow, at most about
// `budget` payload bytes.  Sets *moved when anything moved.  Ill-formed or
// mismatched input (a peer's descriptor that names another operation) is an
// error with a sentence.
ternResult_t advance(Operation& op, Program& p, const Reduction& red, int nranks, size_t budget,
                     bool* moved);

}  // namespace tern
