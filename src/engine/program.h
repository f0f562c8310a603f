// Programs of Steps: how an operation moves data.  A collective is planned as
// one or more Programs; a Program is a list of Steps executed in order; a Step
// streams `bytes` in from one connection and/or out to another, optionally
// reducing the incoming bytes with a local buffer on the fly (NCCL's
// recvReduceSend / recvReduceCopySend / recvCopySend, one pass each).
//
// Programs know nothing of priorities or of other operations: the executor
// (executor.h) decides which operation's programs advance, and advance() moves
// one program as far as its fifos and a byte budget allow, then returns, so the
// executor can serve a more urgent operation at the next chunk boundary.
//
// The rest of a program's way, one job a file: advance (advance.h), a step's payload
// (step_payload.h), single copy (direct_transfer.h), peers' descriptors and
// the ones streams owe (descriptors.h), who holds a stream (stream_claims.h),
// padding and records on a stream (stream_records.h), what holds a waiting
// phase up (phase_blockers.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/env.h"
#include "memory/memory.h"
#include "tern/tern.h"
#include "transport/transport.h"

namespace tern {
namespace model {
struct Model;
}

struct Operation;
struct OpDesc;
struct HostLayout;  // topology/hosts.h

// A codec turns groups of incoming bytes into groups of outgoing bytes (and
// may write the caller's buffer itself): the ternary allreduce's fused
// decode-add-encode.  `first` counts groups from the start of the step.
class GroupCodec {
 public:
  virtual ~GroupCodec() = default;
  virtual void run(const char* in, char* out, size_t first, size_t n) const = 0;
};

struct Step {
  Conn* in = nullptr;            // receive from (nullptr: nothing to receive)
  Conn* out = nullptr;           // send to (nullptr: nothing to send)
  const char* local = nullptr;   // reduced with incoming bytes, or the source when !in
  char* dst = nullptr;           // where the result lands (may be nullptr)
  size_t bytes = 0;              // payload bytes (codec steps: groups)
  bool reduce = false;           // result = incoming (op) local
  bool finalAvg = false;         // ternAvg: divide this (last) reduction by nranks
  // (The flags stay together before the codec's fields: a Step is one
  // 64-byte line, and a power of two keeps steps.size() a shift on the
  // small path, where dividing by 72 cost ~25 instructions a call.)
  // A plain transfer from the caller's buffer (`local`, sender) into the
  // caller's buffer (`dst`, receiver), nothing else (but that a send may
  // copy its source into its own `dst` on the way: a 2-rank allgather's own
  // block, copied while the receiver reads if it goes single copy), or one the receiver
  // reduces into `dst` (a 2-rank reduce: the sender's step feedsReduce): it
  // may go single copy over a connection that offers it
  // (DirectCopy::minBytes), a reduced one only out of mapped host memory.
  // Set by the plans of both ends alike, so both know a direct header comes
  // first.
  bool direct = false;
  // A receive of the peer's descriptor alone that need not hold up its
  // operation (a rooted collective's check that the ranks it only sends to
  // agree; collectives/transfers.h, Transfers::hear): checked if it comes
  // while the rest of the operation runs, else owed by the stream (StreamMarks::owed)
  // and checked by its next reader.  So a rank that only sends returns when
  // its sends are out, as MPI's eager sends do, instead of a round trip later.
  bool deferrable = false;
  // The small path's reading of a whole phase whose streams each serve one
  // program (Phase::fixedGreets): the step is the operation's first use of
  // its input / output stream, so the operation's descriptor leads it.
  bool greetsIn = false, greetsOut = false;
  // The receiver reduces what this step sends, which takes it longer than
  // the copy takes us: the payload goes in small bursts (advance.cc,
  // kFeedBurst) so the reduction starts after the first one, not after 256 KiB.
  bool feedsReduce = false;
  // The receiver reduces what this step sends while this rank reduces what
  // that receiver sends it (a 2-rank reduce-scatter's pair): both cores have
  // work, so the payload goes in full bursts, and out of mapped host memory
  // at any size (direct_transfer.cc, kMappedReduceMax).
  bool mutualReduce = false;
  const GroupCodec* codec = nullptr;  // codec step: framed, group-wise
  uint32_t inUnit = 0, outUnit = 0;   // codec step: bytes per group in / out
};
static_assert(sizeof(Step) == 64, "a Step is one line (see above)");

// Codec steps travel framed: a 16-byte header (magic, unit, groups) that the
// receiver checks before reading a byte of payload.
struct StepHeader {
  uint32_t magic, unit;
  uint64_t groups;
};
constexpr uint32_t kStepMagic = 0x59524e54;  // "TNRY"

// A direct step's header: how the payload comes.  Mode 0: it follows in the
// stream.  Mode 1: read it at `addr` in the sender's (host) memory.  Mode 2:
// copy it from the sender's device buffer, named by the IPC handle posted
// beside the fifo (Conn::ipcPost).  The receiver may decline modes 1 and 2
// (Conn::directDecline): the payload then follows in the stream.
struct DirectHeader {
  uint32_t magic, mode;
  uint64_t bytes, addr, pad;
};
static_assert(sizeof(DirectHeader) == 32, "a direct header fills one 32-byte slot");
constexpr uint32_t kDirectMagic = 0x52494454;  // "TDIR"

struct Reduction {
  ternDataType_t dt = ternUint8;
  ternRedOp_t op = ternSum;
};

// What comes before a step's payload on one stream, in order: padding, the
// operation's descriptor (its first use of the stream), the codec header,
// padding to the group size.  Counts bytes still to go.
struct Lead {
  size_t skip = 0, desc = 0, hdr = 0, skip2 = 0;
  size_t left() const { return skip + desc + hdr + skip2; }
};

struct Program {
  std::vector<Step> steps;
  // Execution state, owned by advance(): the current step, payload units
  // done, and what is left of the in / out leads.
  size_t cur = 0, off = 0;
  // A forwarding step over unstaged connections: bytes received into the
  // caller's buffer and not yet sent on (step_payload.cc, unstagedPayload).
  size_t fwd = 0;
  bool started = false;
  Lead in, out;
  // The current step goes single copy: the sender waits until the receiver
  // has read up to `ticket` on the connection; the receiver reads at peerAddr.
  bool directNow = false;
  uint64_t ticket = 0, peerAddr = 0;
  // A direct send that also copies its source to `dst` (a 2-rank allgather's
  // own block): bytes of that copy done while the receiver reads.
  size_t ownCopied = 0;
  // Receiver over IPC: the sender's buffer mapped here, and whether the
  // device copy out of it is enqueued (done at `fence`).
  const char* ipcSrc = nullptr;
  bool ipcInFlight = false;
  // An asynchronous memory type's burst in flight: its fifo bytes are
  // consumed / committed and its units counted once `fence` is done.
  bool pending = false;
  uint64_t fence = 0;
  size_t pendIn = 0, pendOut = 0, pendUnits = 0;
  // A program that reduces otherwise than its phase: two programs of one
  // phase on different streams with different reductions (the two-level
  // ternary allreduce's host sums beside its scales; the task owns it).
  // Null: the phase's.
  const Reduction* red = nullptr;
  void add(const Step& s) {
    if (s.bytes > 0) steps.push_back(s);
  }
  bool done() const { return cur >= steps.size(); }
};

// One phase of an operation: programs that run together, and how they reduce.
struct Phase {
  std::vector<Program> progs;
  Reduction red;
  const char* what = "";
  // Nothing to move yet (a stream's receiver waiting for its next message,
  // a sender waiting for a push to finish its copy): the task is asked
  // again next round; neither progress nor a stall.
  bool listening = false;
  // Its messages are whole, each with its own descriptor (an interleaved
  // kind's): the operation greets its streams anew in this phase and lets
  // go of them (StreamMarks::reader / writer) when the phase ends.
  bool reframe = false;
  // ... but it keeps the streams it holds into the next phase (a weight
  // stream's version goes whole: chunks back to back, so a collective that
  // the receiver joins only once the version arrived never gets between).
  bool holdStreams = false;
  // The small path found that it runs every step whole (inline_runner.cc,
  // runsWhole): a plan it keeps for a repeated call is not checked again
  // (what it checks of a connection changes only when it opens, and no
  // operation holds a stream while the path runs).
  bool whole = false;
  // ... and its steps' greetsIn / greetsOut are set (inline_runner.cc,
  // fixGreetings): no stream serves two programs in one direction.
  bool fixedGreets = false;
  // An unordered operation's phase: when its message was posted (an
  // Executor::stamp).  Ordered operations issued before it go first on a
  // stream they both want; those issued after it wait.
  uint64_t postedAt = 0;
};

// How a program's reducing steps reduce.
inline const Reduction& reductionOf(const Phase& ph, const Program& p) { return p.red ? *p.red : ph.red; }

// What a plan needs from its communicator: who is where, and the connections
// of the operation's priority level (conns[peer], self included).
struct PlanCtx {
  int rank = 0, nranks = 1;
  const std::vector<int>* ring = nullptr;     // ring[i]: the rank at position i
  const std::vector<int>* ringPos = nullptr;  // ringPos[r]: rank r's position
  const LevelConns* conns = nullptr;  // the level's, per peer: each made when a plan first names it
  const Config* cfg = nullptr;
  const MemOps* mem = nullptr;  // how the operation's buffers are copied, reduced, coded
  const HostLayout* hosts = nullptr;  // which ranks share a host (null: all one host)
  const model::Model* model = nullptr;  // the cost model TERN_ALGO=auto asks (null: its rule)

  int pos() const { return (*ringPos)[rank]; }
  int posOf(int r) const { return (*ringPos)[r]; }
  int rankAt(int p) const { return (*ring)[((p % nranks) + nranks) % nranks]; }
  Conn* conn(int peer) const { return conns->at(peer); }
  Conn* next() const { return conn(rankAt(pos() + 1)); }
  Conn* prev() const { return conn(rankAt(pos() - 1)); }
};

// Every message starts aligned on its stream: dense payloads to 8 bytes,
// descriptors to the stream's record alignment (Conn::recordAlign: 32, or 8
// on shared memory) and never across a 4 KiB boundary (recordSkip), codec
// headers to 16 and codec groups to their unit.  Fifo capacities are
// multiples of every unit (ternaryFifoQuantum), so an element, a descriptor,
// a header or a group never straddles the wrap point and is always one
// contiguous read.  The padding
// from stream position `pos` to the next multiple of `a`:
// Alignments are powers of two but for codec groups (their unit): a mask
// then, not two 64-bit divisions (tens of cycles each on the small path).
inline size_t alignUp(uint64_t pos, size_t a) {
  if ((a & (a - 1)) == 0) return static_cast<size_t>(-pos & (a - 1));
  return static_cast<size_t>((a - pos % a) % a);
}

// The padding before a descriptor at stream position `pos`: to the stream's
// record alignment (Conn::recordAlign), and on to the next 4 KiB where the
// descriptor and the header that may follow it (a single-copy or codec step's,
// 32 bytes at most) would otherwise cross one.  A fifo's wrap point always
// lies on a multiple of 4 KiB (capacities and granules are multiples of the
// page: ternaryFifoQuantum, and a ring restarts on a granule), so neither
// straddles it, also on shared memory, whose records align to 8 bytes only:
// an 8-byte message and its descriptor (40 bytes) then take 40 bytes of a
// line, not 64, and the next call's message starts in a line the reader
// already has (perf/RESULTS.md, 2026-12-06: the fast phase against 1937317,
// small messages packed, a group keeps the drive token, and what is left
// short).
inline size_t recordSkip(uint64_t pos, size_t align) {
  constexpr uint64_t kPage = 4096, kRecordAndHeader = 64;
  size_t skip = alignUp(pos, align);
  const uint64_t at = (pos + skip) & (kPage - 1);
  if (at > kPage - kRecordAndHeader) skip += static_cast<size_t>(kPage - at);
  return skip;
}

// Whether a step carries a direct header: a direct step at least as large as
// its connection's single-copy threshold (both ends compute the same; the
// threshold is settled once the connection is open, Conn::settle).
inline bool directCandidate(const Step& s) {
  const Conn* c = s.in ? s.in : s.out;
  return s.direct && c && c->directFrom() > 0 && s.bytes >= c->directFrom();
}

// Moves a phase's steps onto their connections' low-latency siblings
// (Conn::small) for an operation of `opBytes` payload bytes (the executor's
// choice for ordered small operations; a plan checker's too).  Framed codec
// phases (the ternary allreduce's) stay where they are: both ends see the
// same plan.
void takeSmallChannels(Phase& ph, uint64_t opBytes);

}  // namespace tern
