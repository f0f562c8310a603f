// Two-level allreduce (issue 45; Horovod's hierarchical allreduce): the
// network carries each host's sum once instead of every rank's part of a
// flat ring.  With H hosts of L ranks each, rank j of every host:
//
//   1. reduce-scatter inside its host (a ring over shm): it ends with its
//      host's sum of slice j (slices: the buffer cut in L);
//   2. allreduce of slice j with rank j of every other host (a ring across
//      hosts, one "rail" per local rank): the global sum of slice j;
//   3. allgather inside its host: every slice to every rank of the host.
//
// Bytes a host's NIC sends: 2(H-1)/H of the buffer (L rails of 1/L each),
// where a host-ordered flat ring of N = H*L ranks sends 2(N-1)/N through each
// host boundary: 1.5x more at 2 hosts x 2 ranks.  Inside the host each rank
// sends 2(L-1)/L of the buffer over shm, which costs far less.
//
// Uneven hosts (3+1, 2+1) get the same scheme, not a fallback: host h cuts
// the buffer into its own L_h slices; the cuts of every host together split
// the buffer into segments, and each segment has exactly one owner per host
// (the rank whose slice holds it).  Step 2 runs one ring per segment among
// its owners, in segment order on every rank, so the rings never wait on
// each other in a cycle.  A host of one rank skips steps 1 and 3, and its
// rank owns every segment: its NIC still sends 2(H-1)/H of the buffer, as
// every host's does.  With one host, step 2 is empty (a reduce-scatter and
// an allgather: the flat ring's bytes).
//
// One program: the three steps in order (each chunked, so a ring's chunks
// flow on while they arrive).  ternAvg divides at the last reduction of each
// element: in step 2, or in step 1 when there is one host.  The reduction
// order differs from the flat ring's (host sums first), so floating-point
// results may differ from the ring's in the last bits; integers and exactly
// representable sums do not.
#include <algorithm>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/ring.h"
#include "topology/hosts.h"

namespace tern {

namespace {

// The member of `cuts`' slices that holds element e (the non-empty slice
// [cuts[i], cuts[i+1]) with e inside it).
int holder(const std::vector<size_t>& cuts, size_t e) {
  return static_cast<int>(std::upper_bound(cuts.begin(), cuts.end(), e) - cuts.begin()) - 1;
}

}  // namespace

void planAllReduceTwoLevel(const PlanCtx& x, const void* src, void* dst, size_t count,
                           ternDataType_t dt, ternRedOp_t op, Phase* ph) {
  const HostLayout& hl = *x.hosts;
  const size_t esz = ternTypeSize(dt), chunk = x.cfg->chunkBytes;
  const int H = hl.hosts(), host = hl.hostOf[x.rank], me = hl.localRank[x.rank];
  const std::vector<int>& mine = hl.members[host];
  const int L = static_cast<int>(mine.size());
  const bool avg = op == ternAvg;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  ph->red = {dt, op};
  ph->what = "allreduce (two-level)";

  // 1. Host sums of this rank's slice, into d (a host of one: its input is
  // the host sum; step 2 reads it from s).
  const std::vector<size_t> myCuts = sliceCuts(count, L);
  const std::vector<Span> mySlices = spansOf(myCuts);
  const RingSpan local = ringOf(x, mine, me);
  if (L > 1) ringReduceScatterSteps(prog, local, mySlices.data(), s, d, esz, chunk, avg && H == 1);
  const char* hostSum = L > 1 ? d : s;

  // 2. Every segment this rank owns, with its owners on the other hosts.
  if (H > 1) {
    std::vector<std::vector<size_t>> cutsOf(H);
    std::vector<size_t> bounds;
    for (int h = 0; h < H; ++h) {
      cutsOf[h] = sliceCuts(count, static_cast<int>(hl.members[h].size()));
      bounds.insert(bounds.end(), cutsOf[h].begin(), cutsOf[h].end());
    }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    std::vector<int> owners(H);
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      const size_t lo = bounds[k], n = bounds[k + 1] - lo;
      if (holder(myCuts, lo) != me) continue;
      for (int h = 0; h < H; ++h) owners[h] = hl.members[h][holder(cutsOf[h], lo)];
      ringAllReduceSteps(prog, ringOf(x, owners, host), hostSum + lo * esz, d + lo * esz, n, esz, chunk,
                         avg);
    }
  }

  // 3. The host's slices to all its ranks.
  if (L > 1) ringAllGatherSteps(prog, local, mySlices.data(), nullptr, d, esz, chunk);
}

}  // namespace tern
