// Single copy between ranks of one host (docs/DECISIONS.md, "Single copy
// for plain transfers"): a direct step's header (DirectHeader: how the
// payload comes), the receiver's answer (read the sender's host buffer,
// copy its device buffer over IPC, or decline), and the payload itself;
// advance (program.cc) calls them for a step that directCandidate picks.
#pragma once
#include "engine/program.h"

namespace tern {

// The sender's header, once *left says it is still to go and the fifo
// has room (and, over IPC, the handle's slot is free).  Sets p.directNow
// when the receiver is to read the buffer itself, and the ticket it acknowledges.
void writeDirect(Operation& op, Program& p, const Step& s, size_t* left);
// The receiver reads the header once it has arrived and answers it
// (accepts: p.directNow, or declines: the payload then streams).
ternResult_t readDirect(Operation& op, Program& p, const Step& s, size_t* left);
// A direct step's payload: the receiver reads (or, a 2-rank reduce's root,
// reduces) a slice of the sender's buffer; the sender is done once the receiver has read all of it, or
// streams it after all if the receiver declined (p.directNow turns false).
ternResult_t directPayload(const MemOps& mem, Program& p, const Step& s, const Reduction& red, int nranks,
                           size_t limit, size_t* units, bool* moved);

}  // namespace tern
