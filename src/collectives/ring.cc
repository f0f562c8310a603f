// Ring reduce-scatter and allgather over blocks of any sizes (ring.h).  A
// block goes around in rounds of one chunk per block, so partial sums flow on
// while they arrive, as in reduce_scatter.cc and allgather.cc; blocks may
// differ in length (a count that the members do not divide), and a block
// that has no chunk left in a round skips its steps on every member alike
// (both ends of a hop compute the same length for the same block and round).
#include "collectives/ring.h"

#include <algorithm>

namespace tern {

namespace {

// Rounds of chunks of at most `maxChunk` elements that the longest block needs.
size_t roundsFor(const RingSpan& ring, const Span* blocks, size_t maxChunk) {
  size_t longest = 0;
  for (int k = 0; k < ring.n; ++k) longest = std::max(longest, blocks[k].n);
  return (longest + maxChunk - 1) / maxChunk;
}

// Round `c`'s chunk of the block at position k: byte offset and length (0:
// the block has nothing left in this round).
struct Chunk {
  const Span* blocks;
  int n;
  size_t esz, maxChunk, c;
  size_t at(int k, size_t* off) const {
    const Span& b = blocks[(k % n + n) % n];
    const size_t done = std::min(c * maxChunk, b.n);
    *off = (b.at + done) * esz;
    return std::min(maxChunk, b.n - done) * esz;
  }
};

}  // namespace

std::vector<size_t> sliceCuts(size_t count, int L, size_t unit) {
  const size_t units = (count + unit - 1) / unit;
  std::vector<size_t> cuts(L + 1);
  for (int i = 0; i <= L; ++i) cuts[i] = std::min(count, (units / L * i + std::min<size_t>(units % L, i)) * unit);
  return cuts;
}

std::vector<Span> spansOf(const std::vector<size_t>& cuts) {
  std::vector<Span> b(cuts.size() - 1);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) b[k] = Span{cuts[k], cuts[k + 1] - cuts[k]};
  return b;
}

Span pieceOf(const Span& whole, int k, int P, size_t unit) {
  const std::vector<size_t> cuts = sliceCuts(whole.n, P, unit);
  return Span{whole.at + cuts[k], cuts[k + 1] - cuts[k]};
}

RingSpan ringOf(const PlanCtx& x, const std::vector<int>& members, int pos) {
  const int n = static_cast<int>(members.size());
  return RingSpan{n, pos, x.conn(members[(pos + n - 1) % n]), x.conn(members[(pos + 1) % n])};
}

void ringReduceScatterSteps(Program& prog, const RingSpan& ring, const Span* blocks, const char* s,
                            char* d, size_t esz, size_t chunkBytes, bool avg) {
  const int n = ring.n, r = ring.pos;
  const size_t maxChunk = std::max<size_t>(1, chunkBytes / esz);
  for (size_t c = 0, rounds = roundsFor(ring, blocks, maxChunk); c < rounds; ++c) {
    const Chunk ch{blocks, n, esz, maxChunk, c};
    size_t off, len = ch.at(r - 1, &off);
    prog.add({nullptr, ring.out, s + off, nullptr, len});
    for (int st = 1; st <= n - 2; ++st) {
      len = ch.at(r - 1 - st, &off);
      prog.add({ring.in, ring.out, s + off, nullptr, len, true});
    }
    len = ch.at(r, &off);
    prog.add({ring.in, nullptr, s + off, d + off, len, true, avg});
  }
}

void ringAllGatherSteps(Program& prog, const RingSpan& ring, const Span* blocks, const char* mine,
                        char* d, size_t esz, size_t chunkBytes) {
  const int n = ring.n, r = ring.pos;
  const size_t maxChunk = std::max<size_t>(1, chunkBytes / esz);
  const size_t own = blocks[r].at * esz;
  for (size_t c = 0, rounds = roundsFor(ring, blocks, maxChunk); c < rounds; ++c) {
    const Chunk ch{blocks, n, esz, maxChunk, c};
    size_t off, len = ch.at(r, &off);
    // This rank's block leaves from its input and lands in d on the way.
    const char* from = mine ? mine + (off - own) : d + off;
    prog.add({nullptr, ring.out, from, from != d + off ? d + off : nullptr, len});
    for (int t = 1; t <= n - 2; ++t) {
      len = ch.at(r - t, &off);
      prog.add({ring.in, ring.out, nullptr, d + off, len});
    }
    len = ch.at(r + 1, &off);
    prog.add({ring.in, nullptr, nullptr, d + off, len});
  }
}

}  // namespace tern
