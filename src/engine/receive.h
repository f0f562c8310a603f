// The start of a receive: its sequence number on its peer's stream, and for
// a receive from any source (ternRecvAny) the choice of that peer.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/operation.h"

namespace tern {

// Receives are numbered per peer and level when they start (they start in
// issue order per peer, so the numbers are those of the matching sends); a
// receive from any source is first bound to the peer whose send to this rank
// has arrived (its descriptor names a send to this rank of this level).
// *ready is false while no such send is there; nothing is consumed then.
ternResult_t startRecv(Operation& op, std::vector<uint64_t>& recvSeq, bool* ready);

// A receive from any source that is still looking for its peer.
inline bool unboundRecv(const Operation& op) { return !op.collective && !op.send && op.peer < 0; }

}  // namespace tern
