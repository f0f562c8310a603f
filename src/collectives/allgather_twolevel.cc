// Two-level allgather (issue 45): H hosts of L ranks each; rank j of a host
//
//   1. gathers the blocks of rank j of every host (a ring across hosts, one
//      "rail" per local rank, its own block leaving from its input);
//   2. then, host by host, passes on the blocks its rail brought in while the
//      other local ranks pass theirs (a ring inside its host per host: in
//      ring g, local rank k contributes the block of host g's rank k).
//
// A host's NIC sends L(H-1) blocks where the host-ordered flat ring sends
// N-1 through each host boundary: 2 against 3 at 2 hosts x 2 ranks.  Hosts
// with different rank counts have no common rails: chooseAlgo gives them the
// ring (algo_choice.cc).  One program, stages in order, each chunked.
#include <vector>

#include "collectives/collectives.h"
#include "collectives/ring.h"
#include "topology/hosts.h"

namespace tern {

void planAllGatherTwoLevel(const PlanCtx& x, const void* src, void* dst, size_t bytesPerRank, Phase* ph) {
  const HostLayout& hl = *x.hosts;
  const int H = hl.hosts(), host = hl.hostOf[x.rank], me = hl.localRank[x.rank];
  const std::vector<int>& mine = hl.members[host];
  const int L = static_cast<int>(mine.size());
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  const size_t chunk = x.cfg->chunkBytes;
  ph->what = "allgather (two-level)";
  ph->progs.resize(1);
  Program& prog = ph->progs[0];
  auto blockOf = [&](int rank) { return Span{static_cast<size_t>(rank) * bytesPerRank, bytesPerRank}; };

  // 1. This rank's rail: rank `me` of every host.
  std::vector<int> rail(H);
  std::vector<Span> blocks(H);
  for (int g = 0; g < H; ++g) rail[g] = hl.members[g][me], blocks[g] = blockOf(rail[g]);
  if (H > 1) ringAllGatherSteps(prog, ringOf(x, rail, host), blocks.data(), s, d, 1, chunk);

  // 2. Each host's blocks among this host's ranks (with one host, this
  // rank's own block still leaves from its input).  A rank alone on its
  // host has every block after step 1.
  if (L == 1) return;
  const RingSpan local = ringOf(x, mine, me);
  blocks.resize(L);
  for (int g = 0; g < H; ++g) {
    for (int k = 0; k < L; ++k) blocks[k] = blockOf(hl.members[g][k]);
    ringAllGatherSteps(prog, local, blocks.data(), H == 1 ? s : nullptr, d, 1, chunk);
  }
}

}  // namespace tern
