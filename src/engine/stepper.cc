// Stepper (stepper.h): one operation's way through the engine, a step at a time.
#include "engine/stepper.h"

#include <algorithm>

#include "base/dtype.h"
#include "base/error.h"
#include "base/futex.h"
#include "engine/advance.h"
#include "engine/descriptors.h"
#include "engine/stream_claims.h"
#include "engine/trace.h"

namespace tern {

namespace {

// Small operations move on their connections' low-latency siblings
// (Conn::small, transport/ll.h).  Every rank decides from its descriptor and
// the limit both ends of the connection agreed on, so both ends of a stream
// pick the same sibling; interleaved kinds (weight streams) keep the fifo,
// whose message boundaries they share with others.
bool mayGoSmall(const Operation& op) { return !op.unordered && !opKind(op.desc.kind).interleaved; }

// Moves a phase's steps onto the small siblings (program.h).
void takeSmallChannels(Operation& op) {
  if (mayGoSmall(op)) takeSmallChannels(op.phase, payloadBytes(op.desc));
}

}  // namespace

ternResult_t Stepper::step(Operation& op, size_t budget, bool* moved, bool* pumped, bool* finished) {
  if (!op.begun) {
    if (!op.ctx.mem->ready()) return ternSuccess;  // the caller's stream is not there yet
    TERN_CHECK(begin(op, finished));
    if (*finished) return ternSuccess;
  }
  if (!op.opening.empty()) {
    TERN_CHECK(awaitOpen(op));
    if (!op.opening.empty()) return ternSuccess;
  }
  TERN_CHECK(pump(op, pumped));
  bool done = true;
  TERN_CHECK(runPrograms(op, budget, moved, &done));
  op.moves += *moved || *pumped;
  if (!done) return ternSuccess;
  for (Conn* k : op.pumps)  // everything sent has left the process
    if (!k->flushed()) return ternSuccess;
  TERN_CHECK(beginPhase(op, finished));
  *moved = *finished || !op.phase.listening;
  // An unordered operation's next message takes its stream now, before an
  // ordered operation issued after that message was posted gets its turn
  // in this round (see Phase::postedAt).
  if (op.unordered && !*finished && !op.phase.listening && op.opening.empty())
    TERN_CHECK(runPrograms(op, budget, moved, &done));
  return ternSuccess;
}

// The operation starts: its scaled input (PreMulSum), a receive's number, its first phase.
ternResult_t Stepper::begin(Operation& op, bool* finished) {
  op.begun = true;
  const Operation::PreMul& pm = op.premul;
  if (pm.count) op.ctx.mem->scale(pm.scaled, pm.src, pm.count, pm.dt, pm.scalar);
  if (!op.collective && !op.send && !op.unordered) op.desc.seq = levels_.nextRecvSeq(op);
  if (trace_) trace_->started(op);
  return beginPhase(op, finished);
}

// While priorities are in use, a less urgent level keeps what it leaves in
// the kernel short: bytes queued there (and in the qdisc, and in a shaper's
// FIFO) go before a more urgent level's next message whatever the engine
// decides.  Measured (perf/RESULTS.md, 2026-11-27): an urgent allreduce of
// a few KB waited 77 ms behind 9.6 MB of bulk in a shaper's queue.
ternResult_t Stepper::pump(Operation& op, bool* pumped) {
  const bool bulk = !op.pumps.empty() && levels_.urgentInUse(op.level);
  const bool mixed = bulk || (!op.pumps.empty() && levels_.anyActiveBelow(levels_[op.level]));
  for (Conn* k : op.pumps) {
    bool m = false;
    k->bulk = bulk;
    k->mixed = mixed;
    TERN_CHECK(k->progress(&m));
    *pumped |= m;
  }
  return ternSuccess;
}

ternResult_t Stepper::runPrograms(Operation& op, size_t budget, bool* moved, bool* done) {
  for (Program& p : op.phase.progs) TERN_CHECK(advance(op, p, reductionOf(op.phase, p), op.ctx.nranks, budget, moved));
  *done = phaseThrough(op.phase, op.desc);
  return ternSuccess;
}

ternResult_t Stepper::beginPhase(Operation& op, bool* finished) {
  for (;;) {
    if (op.phase.reframe) {  // its messages were whole: the next phase greets anew
      if (!op.phase.holdStreams) letGo(op);
      op.greetedIn.clear();
      op.greetedOut.clear();
    }
    resetPhase(op.phase);  // keeps the step storage: no allocation per phase
    bool more = false;
    TERN_CHECK(op.task->next(op.ctx, &op.phase, &more));
    if (!more) {
      *finished = true;
      return ternSuccess;
    }
    bool any = false;
    for (const Program& p : op.phase.progs) any |= !p.steps.empty();
    if (any || op.phase.listening) break;  // else a phase of local work only: go on to the next
  }
  TERN_CHECK(adoptPhase(op));
  op.moves += !op.phase.listening;  // a new phase is progress
  return ternSuccess;
}

ternResult_t Stepper::adoptPhase(Operation& op) {
  op.pumps.clear();
  op.opening.clear();
  Conn* last = nullptr;  // steps mostly use one connection in a row: adopted once
  for (const Program& p : op.phase.progs)
    for (const Step& s : p.steps)
      for (Conn* k : {s.in, s.out}) {
        if (!k || k == last || std::find(op.pumps.begin(), op.pumps.end(), k) != op.pumps.end() ||
            std::find(op.opening.begin(), op.opening.end(), k) != op.opening.end())
          continue;
        last = k;
        TERN_CHECK(adopt(op, k));
      }
  // The low-latency siblings exist (and both ends agreed on their limit)
  // once a connection is open: chosen now, or when the last opening ends.
  if (op.opening.empty()) takeSmallChannels(op);
  return ternSuccess;
}

// A connection the phase uses: pumped if open (and its transport needs it),
// else awaited (its opening runs on the connection table's thread).
// A low-latency sibling (Conn::owner) opens with its connection.
ternResult_t Stepper::adopt(Operation& op, Conn* k) {
  bool ready;
  if (k->owner) k = k->owner;
  TERN_CHECK(k->use(&ready));
  if (!ready) op.opening.push_back(k);
  else if (k->needsProgress()) op.pumps.push_back(k);
  return ternSuccess;
}

// The phase's programs run once all its connections are open; an opening
// that fails fails the operation, one that never ends times it out.
ternResult_t Stepper::awaitOpen(Operation& op) {
  std::vector<Conn*> waiting;
  waiting.swap(op.opening);
  for (Conn* k : waiting) TERN_CHECK(adopt(op, k));
  op.moves += op.opening.size() < waiting.size();  // a connection opened: progress
  if (op.opening.empty()) takeSmallChannels(op);
  return ternSuccess;
}

// An asynchronous memory type's last work (a final division, a copy after
// the last receive) must have run first; then the caller's stream is
// released (MemOps::end).  A device failure becomes the operation's.
bool Stepper::settled(Operation& op, ternResult_t* r) {
  const MemOps& m = *op.ctx.mem;
  if (!m.async()) return true;
  if (!op.draining) {
    op.draining = true;
    op.drainFence = m.fence();
  }
  if (!m.done(op.drainFence)) return false;
  m.end();
  if (m.error() != ternSuccess) *r = setError(m.error(), m.lastError());
  return true;
}

// The threads that releaseToken() wakes take this core before the caller
// has returned: over shm, an urgent allreduce beside a bulk one, driven by
// its caller to completion in its solo time, returned 1-5 ms later, behind
// its own progress thread (perf/RESULTS.md, 2026-12-05: the urgent caller
// returns before the bulk's driver wakes).  So when only less urgent work
// is left, and the progress thread is in its timed nap (Waits::napForWork:
// it naps while a caller drives), the progress thread takes that work over
// at the nap's end (<= 1 ms) instead.  Work as urgent as the caller's, work
// pending admission (its level unread), a waiter asking at the caller's
// level or above, or a progress thread not napping: woken at once.
void Stepper::handBack(DriveToken& token, int level) {
  if (admission_.outstanding() > 0 && waits_.progressNaps() && !token.wanted(level + 1) &&
      !admission_.anyPending() && !levels_.anyLiveAtOrAbove(level)) {
    token.letGo();
    return;
  }
  releaseToken(token);
}

void Stepper::complete(Operation& op, ternResult_t r, const std::string& err) {
  op.result = r;
  if (op.ctx.mem) op.ctx.mem->end();  // a failure too: the caller's stream never waits forever
  if (trace_) trace_->completed(op);
  if (!err.empty()) op.error = err;  // empty since the operation was made
  if (r == ternSuccess && !op.standing) admission_.countCompleted();
  letGo(op);
  // No lock unless someone sleeps (the blocking caller usually drives its
  // own operation): a lock pair less per call (see Waits::wakeWaiters()).
  op.done.store(true);
  op.doneWord.store(1);  // seq_cst: Waits::sleepOnDone() either sees it or is counted in sleepers
  if (op.sleepers.load() > 0) futexWakeAll(&op.doneWord);
  admission_.countOff(op);
  waits_.wakeWaiters();
}

// Every admitted operation ends with the sentence that says why (the peers
// hear of it through the closed sockets).  A gone peer is not the why when
// the communicator failed first: a peer that saw a mismatch tells every rank
// before it exits, and the control thread may read that notice, and the
// peer's end, between this thread's last look at its communicator and its
// finding the peer gone.  The communicator keeps its first failure.
void Stepper::failAll(ternResult_t r, const std::string& why) {
  host_.onFailure(r, why);
  std::string first = why;
  if (r == ternRemoteError) r = host_.firstFailure(r, &first);
  admit();
  for (Levels::List& list : levels_) {
    for (OpPtr& op : list)
      if (!op->done.load()) complete(*op, r, first);
    list.clear();
  }
}

}  // namespace tern
