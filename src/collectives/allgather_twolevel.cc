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
// ring (algo_choice.cc).
//
// Small blocks: one phase, one program, stages in order, each chunked.
// Large blocks (model::overlapPieces: at least 8 chunks a piece) are cut in
// P pieces and the stages overlap over P + 1 phases of two programs on
// streams of their own: in phase t the rail gathers piece t while, inside
// the host, the ranks pass on piece t of their own host's blocks (from
// their inputs) and piece t - 1 of the other hosts' (which the rail brought
// in the phase before).  So the shm stage runs beside the network one
// instead of after it.
#include <vector>

#include "collectives/collectives.h"
#include "collectives/ring.h"
#include "model/collective_model.h"
#include "topology/hosts.h"

namespace tern {

namespace {

// What every phase of one call needs: who is where, and the blocks.
struct Layout2 {
  const PlanCtx& x;
  const HostLayout& hl;
  int H, host, me, L;
  size_t bytesPerRank;

  Layout2(const PlanCtx& x_, size_t bpr)
      : x(x_), hl(*x_.hosts), H(hl.hosts()), host(hl.hostOf[x_.rank]), me(hl.localRank[x_.rank]),
        L(static_cast<int>(hl.members[host].size())), bytesPerRank(bpr) {}
  // Piece k of P of `rank`'s block (the whole block: P = 1).
  Span piece(int rank, int k, int P) const {
    return pieceOf(Span{static_cast<size_t>(rank) * bytesPerRank, bytesPerRank}, k, P, 64);
  }
  // This rank's rail: rank `me` of every host.
  RingSpan rail() const {
    std::vector<int> r(H);
    for (int g = 0; g < H; ++g) r[g] = hl.members[g][me];
    return ringOf(x, r, host);
  }
};

// 1. The rail's allgather of piece k: rank `me` of every host's.
void railSteps(const Layout2& l, const char* s, char* d, int k, int P, Program& prog) {
  std::vector<Span> blocks(l.H);
  for (int g = 0; g < l.H; ++g) blocks[g] = l.piece(l.hl.members[g][l.me], k, P);
  const char* mine = s + (blocks[l.host].at - static_cast<size_t>(l.x.rank) * l.bytesPerRank);
  ringAllGatherSteps(prog, l.rail(), blocks.data(), mine, d, 1, l.x.cfg->chunkBytes);
}

// 2. Piece k of host g's blocks among this host's ranks: local rank j
// passes on host g's rank j's, from `mine` (its input: its own host's
// blocks) or from d (where its rail put it).
void hostSteps(const Layout2& l, int g, const char* mine, char* d, int k, int P, Program& prog) {
  std::vector<Span> blocks(l.L);
  for (int j = 0; j < l.L; ++j) blocks[j] = l.piece(l.hl.members[g][j], k, P);
  const char* from = mine ? mine + (blocks[l.me].at - static_cast<size_t>(l.x.rank) * l.bytesPerRank) : nullptr;
  ringAllGatherSteps(prog, ringOf(l.x, l.hl.members[l.host], l.me), blocks.data(), from, d, 1, l.x.cfg->chunkBytes);
}

}  // namespace

int allGatherTwoLevelPieces(const PlanCtx& x, size_t bytesPerRank) {
  const HostLayout& hl = *x.hosts;
  if (hl.hosts() < 2 || hl.members[hl.hostOf[x.rank]].size() < 2) return 1;  // one of the stages is empty
  return model::overlapPieces(static_cast<double>(bytesPerRank), static_cast<double>(x.cfg->chunkBytes));
}

void planAllGatherTwoLevel(const PlanCtx& x, const void* src, void* dst, size_t bytesPerRank, Phase* ph,
                           int phase) {
  const Layout2 l(x, bytesPerRank);
  const int P = allGatherTwoLevelPieces(x, bytesPerRank);
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ph->what = "allgather (two-level)";
  if (P == 1) {  // one phase: the rail, then every host's blocks in the host
    ph->progs.resize(1);
    Program& prog = ph->progs[0];
    if (l.H > 1) railSteps(l, s, d, 0, 1, prog);
    // (A rank alone on its host has every block after the rail; with one
    // host, this rank's own block still leaves from its input.)
    if (l.L > 1)
      for (int g = 0; g < l.H; ++g) hostSteps(l, g, l.H == 1 ? s : nullptr, d, 0, 1, prog);
    return;
  }
  ph->progs.resize(2);
  Program& net = ph->progs[0];
  Program& shm = ph->progs[1];
  if (phase < P) {
    railSteps(l, s, d, phase, P, net);
    hostSteps(l, l.host, s, d, phase, P, shm);
  }
  if (phase >= 1)
    for (int g = 0; g < l.H; ++g)
      if (g != l.host) hostSteps(l, g, nullptr, d, phase - 1, P, shm);
}

}  // namespace tern
