// Ring schedules over any subset of ranks, as steps appended to a program:
// the flat ring allreduce runs them over every rank (allreduce_ring.cc), the
// two-level allreduce and allgather over a host's ranks and over one rank
// per host (allreduce_twolevel.cc, allgather_twolevel.cc).
#pragma once
#include <cstddef>
#include <vector>

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

// Elements [at, at + n) of a buffer: a ring member's block.
struct Span {
  size_t at = 0, n = 0;
};

// Ring reduce-scatter and allgather over blocks anywhere in the buffer, of
// any lengths: blocks[k] is the block of the member at position k; chunks of
// at most chunkBytes.  Reduce-scatter: every member's s summed into d's block
// of this rank (the other blocks of d untouched); `avg` as above.
// Allgather: this rank's block to every member's d, from `mine` (its input;
// null: it is in d already), while the others' blocks land in d.
void ringReduceScatterSteps(Program& prog, const RingSpan& ring, const Span* blocks, const char* s,
                            char* d, size_t esz, size_t chunkBytes, bool avg);
void ringAllGatherSteps(Program& prog, const RingSpan& ring, const Span* blocks, const char* mine,
                        char* d, size_t esz, size_t chunkBytes);

// Where L slices of `count` elements start, each a whole number of `unit`s
// (the first ones a unit more when they do not divide evenly; the last
// slices may be empty): L + 1 cuts, the last = count.  The two-level plans'
// host slices.
std::vector<size_t> sliceCuts(size_t count, int L, size_t unit = 1);
// The slices between the cuts as ring blocks (slice k: member k's block).
std::vector<Span> spansOf(const std::vector<size_t>& cuts);
// Piece k of `whole` cut in P pieces of whole `unit`s (sliceCuts): what the
// two-level plans overlap their stages in.
Span pieceOf(const Span& whole, int k, int P, size_t unit);

// The ring of `members` (ranks in ring order) with this rank at `pos`.
RingSpan ringOf(const PlanCtx& x, const std::vector<int>& members, int pos);

}  // namespace tern
