// Ring schedules over any subset of ranks, as steps appended to a program:
// the flat ring allreduce runs them over every rank (allreduce_ring.cc), the
// two-level allreduce over a host's ranks and over one rank per host
// (allreduce_twolevel.cc).
#pragma once
#include <cstddef>

#include "engine/program.h"

namespace tern {

// A ring of n members: this rank's position in it and the connections to
// the members before and after it.
struct RingSpan {
  int n = 1, pos = 0;
  Conn* in = nullptr;   // from position pos - 1
  Conn* out = nullptr;  // to position pos + 1
};

// The pipelined ring allreduce of `count` elements of `esz` bytes from s
// into d (s == d: in place), chunks of at most chunkBytes; `avg` divides the
// last reduction of each element by the operation's rank count.
void ringAllReduceSteps(Program& prog, const RingSpan& ring, const char* s, char* d, size_t count,
                        size_t esz, size_t chunkBytes, bool avg);

// Ring reduce-scatter and allgather over blocks of elements that need not be
// equal: block k (the block of the member at position k) is elements
// [cuts[k], cuts[k+1]) of the buffer; chunks of at most chunkBytes.
// Reduce-scatter: every member's s summed into d's block of this rank (the
// other blocks of d untouched); `avg` as above.  Allgather: d's block of
// this rank to every member's d.
void ringReduceScatterSteps(Program& prog, const RingSpan& ring, const size_t* cuts, const char* s,
                            char* d, size_t esz, size_t chunkBytes, bool avg);
void ringAllGatherSteps(Program& prog, const RingSpan& ring, const size_t* cuts, char* d, size_t esz,
                        size_t chunkBytes);

}  // namespace tern
