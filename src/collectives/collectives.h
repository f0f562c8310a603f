// The collective algorithms as plans.  Each plan function lists the Steps a
// rank runs (engine/program.h) for one collective, on host buffers, after the
// API layer validated its arguments; it moves no data itself (except local
// copies that belong before the first step).  Tasks (engine/operation.h) tie
// an operation to its plans, phase by phase.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>

#include "engine/operation.h"
#include "engine/program.h"

namespace tern {
namespace model {
struct Model;
}

// The kinds of operation the collectives make (their ids travel in every
// descriptor; kinds.cc registers what each must match and how it is named).
// Other kinds live with their tasks (streaming/): ids 32 and up.
enum class OpKind : uint8_t {
  AllReduce = 1, Broadcast, Reduce, AllGather, ReduceScatter, Barrier, Ternary, Send, Recv,
  AllToAll, Gather, Scatter
};
const OpKindInfo& collectiveKind(OpKind k);

// Allreduce: the algorithm chooseAlgo picks (algo_choice.cc).
// Recursive doubling leaves ternAvg's division to the caller
// (allReduceNeedsDivide).
void planAllReduce(const PlanCtx& x, const void* src, void* dst, size_t count, ternDataType_t dt,
                   ternRedOp_t op, Phase* ph);
bool allReduceNeedsDivide(const PlanCtx& x, size_t count, ternDataType_t dt, ternRedOp_t op);

// The algorithms of the allreduce and the allgather, and the one place that
// chooses among them: a pure function of what every rank knows alike (so
// every rank plans the same call the same way).  A later cost model replaces
// the rule inside.
enum class Algo : uint8_t { RecursiveDoubling, Ring, TwoLevel };
struct AlgoFacts {
  OpKind kind = OpKind::AllReduce;  // AllReduce or AllGather
  const char* forced = "auto";      // TERN_ALGO: auto|ring|rd|twolevel
  size_t bytes = 0;                 // the call's payload (allgather: every rank's blocks)
  size_t smallBytes = 0;            // TERN_SMALL_THRESHOLD
  int nranks = 1;
  int hosts = 1, minLocal = 1, maxLocal = 1;  // host count; fewest / most ranks on a host
  const model::Model* model = nullptr;  // TERN_MODEL_FILE's: auto asks it (allreduce)
  bool ucx = false;                     // the link between hosts is ucx (else tcp)
};
// Two-level from this size under auto (with several hosts of several ranks):
// at 2 hosts x 2 ranks the allreduce took 0.70-0.75x the ring's time at
// 64 KiB-64 MiB over 1 Gbit/s links and 0.58-0.93x at 10 Gbit/s
// (perf/RESULTS.md, 2026-12-04: two-level allreduce across emulated hosts);
// smaller sizes were not measured.
constexpr size_t kTwoLevelFromBytes = size_t(64) << 10;
// The allgather's (its output's bytes): 1.28-1.48x the ring's busbw from 1
// MiB to 64 MiB at 1 Gbit/s on a quiet host (perf/RESULTS.md, 2026-12-05:
// the two-level allgather's stages overlapped; noisy below 1 MiB, measured
// on a loaded host on 2026-12-04).
constexpr size_t kTwoLevelAllGatherFromBytes = size_t(1) << 20;
Algo chooseAlgo(const AlgoFacts& f);
// Whether a ternary allreduce runs in two levels (allreduce_ternary.cc):
// with several hosts of as many ranks each (more than one), unless
// TERN_ALGO forces ring or rd or the call clips (its sigma is per rank).
bool chooseTernaryTwoLevel(const AlgoFacts& f, bool clip);
const char* algoName(Algo a);  // "two-level"
// The facts of one call of `kind` on x's communicator.
AlgoFacts algoFacts(const PlanCtx& x, OpKind kind, size_t bytes);

void planAllReduceRing(const PlanCtx& x, const void* src, void* dst, size_t count,
                       ternDataType_t dt, ternRedOp_t op, Phase* ph);
// Intra-host reduce-scatter, an allreduce across hosts per local rank,
// intra-host allgather (allreduce_twolevel.cc); x.hosts must be set.
void planAllReduceTwoLevel(const PlanCtx& x, const void* src, void* dst, size_t count,
                           ternDataType_t dt, ternRedOp_t op, Phase* ph);
void planAllReduceRecursiveDoubling(const PlanCtx& x, const void* src, void* dst, size_t count,
                                    ternDataType_t dt, ternRedOp_t op, Phase* ph);
// Its steps on buffer d (in place, after any copy of the input) in order: a
// fold into a partner, log2 exchanges, the result back to the partner.  An
// exchange goes in pieces of at most a quarter of the fifo, each sent before
// the partner's same piece is received and reduced: both partners send
// first, so a whole buffer larger than the fifo left each waiting for the
// other to make room (TERN_ALGO=rd hung from 6 MiB over shm and tcp).  Up
// to a quarter of the fifo (every small-path call: TERN_SMALL_THRESHOLD is
// capped there) each (peer, direction) appears at most once.  Also the small
// path's schedule (comm/inline_calls.cc), which runs them without a plan and, when it must, hands the
// operation to the engine at the step it reached.  `emit` gets each step in
// turn (no array: a Step is 88 bytes, and zeroing room for the most a rank
// can have, on every call, cost more than the rest of an 8-byte allreduce).
constexpr size_t kMaxRecursiveDoublingSteps = 2 * 31 + 2;
template <class Emit>
void recursiveDoublingSteps(const PlanCtx& x, char* d, size_t bytes, Emit emit) {
  const int n = x.nranks, r = x.rank;
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int rem = n - pow2;
  auto send = [&](int peer, size_t off, size_t len) { emit(Step{nullptr, x.conn(peer), d + off, nullptr, len}); };
  auto recv = [&](int peer, bool reduce, size_t off, size_t len) {
    emit(Step{x.conn(peer), nullptr, reduce ? d + off : nullptr, d + off, len, reduce});
  };
  const size_t piece = std::max<size_t>(x.cfg->fifoBytes / 4, 64);  // whole elements: a multiple of 64
  auto exchange = [&](int peer) {
    size_t off = 0;
    do {  // (a zero-byte call still exchanges its descriptor)
      const size_t len = std::min(piece, bytes - off);
      send(peer, off, len);
      recv(peer, true, off, len);
      off += len;
    } while (off < bytes);
  };
  if (r < 2 * rem && r % 2 == 0) {  // folded away: give data, get result
    send(r + 1, 0, bytes);
    recv(r + 1, false, 0, bytes);
    return;
  }
  if (r < 2 * rem) recv(r - 1, true, 0, bytes);
  const int newRank = r < 2 * rem ? r / 2 : r - rem;
  for (int mask = 1; mask < pow2; mask <<= 1) {
    const int pn = newRank ^ mask;
    exchange(pn < rem ? pn * 2 + 1 : pn + rem);
  }
  if (r < 2 * rem) send(r - 1, 0, bytes);
}
void planBroadcast(const PlanCtx& x, const void* src, void* dst, size_t bytes, int root, Phase* ph);
void planReduce(const PlanCtx& x, const void* src, void* dst, size_t count, ternDataType_t dt,
                ternRedOp_t op, int root, Phase* ph);
// Allgather: the ring, or two-level (chooseAlgo).  Its phases: one, or, two
// levels over large blocks, P + 1 (allGatherPhases); planAllGather plans
// phase `phase` of them.
int allGatherPhases(const PlanCtx& x, size_t bytesPerRank);
void planAllGather(const PlanCtx& x, const void* src, void* dst, size_t bytesPerRank, Phase* ph, int phase = 0);
void planAllGatherRing(const PlanCtx& x, const void* src, void* dst, size_t bytesPerRank, Phase* ph);
// An allgather across hosts per local rank, then inside each host
// (allgather_twolevel.cc); every host must have as many ranks.  Its blocks
// cut in allGatherTwoLevelPieces pieces: phase `phase` of P + 1 (one piece:
// one phase).
int allGatherTwoLevelPieces(const PlanCtx& x, size_t bytesPerRank);
void planAllGatherTwoLevel(const PlanCtx& x, const void* src, void* dst, size_t bytesPerRank, Phase* ph,
                           int phase = 0);
void planReduceScatter(const PlanCtx& x, const void* src, void* dst, size_t recvcount,
                       ternDataType_t dt, ternRedOp_t op, Phase* ph);

// Direct transfers (alltoall.cc): blockBytes per rank pair.  Blocks that fit
// the fifos go as one program, sends before receives, so in place (sendbuff
// == recvbuff) needs no staging copy then.
bool allToAllFitsFifos(const PlanCtx& x, size_t blockBytes);
void planAllToAll(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, Phase* ph);
void planGather(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, int root, Phase* ph);
void planScatter(const PlanCtx& x, const void* src, void* dst, size_t blockBytes, int root, Phase* ph);

// What a dense collective, a barrier or a transfer was asked to do.
struct CollArgs {
  OpKind kind = OpKind::AllReduce;
  const void* src = nullptr;
  void* dst = nullptr;
  size_t count = 0;  // elements (allgather, reduce-scatter: per rank)
  ternDataType_t dt = ternUint8;
  ternRedOp_t op = ternSum;
  int root = -1;     // broadcast/reduce root; send/recv peer (-1: any source)
  int* source = nullptr;  // a receive from any source: where its sender goes
};
inline CollArgs collArgs(OpKind kind, const void* src, void* dst, size_t count, ternDataType_t dt,
                         ternRedOp_t op = ternSum, int root = -1) {
  CollArgs a;
  a.kind = kind;
  a.src = src;
  a.dst = dst;
  a.count = count;
  a.dt = dt;
  a.op = op;
  a.root = root;
  return a;
}
// Dense collectives, the barrier, send and recv.  `reuse`: a recycled
// operation's task (Task::recycle); a dense one is set up again in place.
std::unique_ptr<Task> makeTask(const CollArgs& a, std::unique_ptr<Task> reuse = nullptr);
// A dense call's one phase from its arguments alone (every kind but the
// barrier, whose task holds its token, and the ternary allreduce; an
// all-to-all from its own input): the dense task's plan, and the small
// path's (comm/inline_calls.cc) without an operation.  plansPurely: whether
// planning it does no local work that a second planning would repeat (not
// allreduce: it copies its input into its output first; not an all-to-all
// that stages its input), so the operation the path hands over, if it must,
// can plan the same again; and whether it is one phase (not an allgather
// in pieces).
bool plansPurely(const CollArgs& a, const PlanCtx& x);
void planPure(const CollArgs& a, const PlanCtx& x, Phase* ph);
// A send's or receive's one step over `peer`, its connection to the other
// end: a plain transfer between the caller's buffer and that connection
// (Step::direct).  Its plan's, and the small path's transfers' (comm/inline_calls.cc).
Step p2pStep(const CollArgs& a, Conn* peer);

}  // namespace tern
