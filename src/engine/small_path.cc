// The small path: a blocking caller's operation on an idle engine, carried
// out on the caller's thread with whole messages and no rounds.
//
// A small allreduce spends most of its time in the engine's generality (a
// round over every level, a byte budget, leads laid out piece by piece,
// descriptors peeked apart from payloads: ~4,000 instructions of an 8-byte
// allreduce, perf/RESULTS.md 2026-11-27), not on the two cache lines it moves.
// Here the plan is the same (the task's phases, so every kind and rank count
// plans as before), but each step goes at once: its input is read only when
// the peer's whole message (padding, descriptor, payload) is there, its
// output is written whole, descriptor first, in one commit.  The bytes on
// every stream are the ones advance() would have written, so a peer that
// runs the same operation through its engine (it was busy) matches.
//
// Whatever is not the common case is the engine's: the path hands the
// operation over as it stands (steps done so far stay done; the current step
// has not begun) when a step waits on its peer for longer than a short spin,
// when a stream cannot take or show the message whole (the fifo's wrap
// point, a full fifo), when a peer's descriptor does not match (the engine
// reads it and reports the mismatch), when another thread wants the token or
// issued work, and for phases it does not run at all (connections that are
// not open or need pumping, codecs, single copy, low-latency siblings).  So
// timeouts, dead peers, mismatches and priorities keep their one place.
#include <immintrin.h>
#include <sched.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/executor.h"
#include "transport/shm_streams.h"

namespace tern {

namespace {

// How long a step waits for its peer here before the engine takes over (its
// wait backs off to yielding and sleeping, and it watches the timeout):
// about 10 us, a few times a small operation's whole round trip.
constexpr uint64_t kSpinCycles = 30000;

// Whether the path can run a phase: every connection open, moving bytes
// without pumps (shared memory), its stream free, and every step a plain
// one (no codec framing, no single-copy header, no low-latency sibling).
bool takesWhole(const Step& s, uint64_t opBytes) {
  if (s.codec) return false;
  // Open first: what a connection agreed with its peer (its single-copy
  // threshold, its sibling: Conn::settle) is written by the opening thread
  // until then.
  for (Conn* k : {s.in, s.out})
    if (k && (k->openState.load(std::memory_order_acquire) != Conn::kOpen || k->reader || k->writer ||
              !k->carriesWhole(opBytes)))
      return false;
  return !directCandidate(s);
}

bool runsWhole(const Phase& ph, uint64_t opBytes) {
  for (const Program& p : ph.progs)
    for (const Step& s : p.steps)
      if (!takesWhole(s, opBytes)) return false;
  return true;
}

// A step's stream: through its shared-memory fifos where it has them
// (Conn::shm: inline, no virtual call), else through the connection.
class Stream {
 public:
  explicit Stream(Conn* c) : c_(c), io_(c ? c->shm : nullptr) {}
  explicit operator bool() const { return c_ != nullptr; }
  size_t recordAlign() const { return io_ ? ShmStreams::kRecordAlign : c_->recordAlign(); }
  uint64_t recvPos() const { return io_ ? io_->recvPos() : c_->recvPos(); }
  uint64_t sendPos() const { return io_ ? io_->sendPos() : c_->sendPos(); }
  size_t recvAhead(const char** p) const { return io_ ? io_->recvAhead(p) : c_->recvAhead(p); }
  void recvFound(const char* at, size_t n) const { io_ ? io_->recvFound(at, n) : c_->recvFound(at, n); }
  size_t recvAvail(const char** p) const { return io_ ? io_->recvAvail(p) : c_->recvAvail(p); }
  size_t sendSpace(char** p) const { return io_ ? io_->sendSpace(p) : c_->sendSpace(p); }
  void recvConsume(size_t n) const {
    if (!io_) return c_->recvConsume(n);
    io_->recvConsume(n);
    c_->countRecv(n);
  }
  void sendCommit(size_t n) const {  // and flush: shared memory publishes on commit
    if (!io_) return c_->sendCommit(n), c_->flush();
    io_->sendCommit(n);
    c_->countSent(n);
  }

 private:
  Conn* c_;
  ShmStreams* io_;
};

// Whether AloneGreetings has room for every stream the phase may greet.
bool fitsGreetings(const Phase& ph) {
  size_t steps = 0;
  for (const Program& p : ph.progs) steps += p.steps.size();
  return steps <= AloneGreetings::kMax;
}

// What stands on a stream before a step's payload: padding to the record
// alignment and the operation's descriptor on its first use of the stream,
// else padding to 8 bytes.
struct Head {
  size_t skip, desc;
  size_t bytes() const { return skip + desc; }
};
Head headOf(size_t align, uint64_t pos, bool greeted) {
  return greeted ? Head{alignUp(pos, 8), 0} : Head{alignUp(pos, align), sizeof(OpDesc)};
}

enum class Try { kDone, kWait, kEngine };

// A step's work on its whole payload.  The path runs host buffers only
// (Comm::takesAlone, callAlone), so a plain step's copies are memcpy here,
// without executeStep's call and MemOps' virtual one (~60 of an 8-byte
// broadcast's instructions); reductions are executeStep's.
void runWhole(const MemOps& mem, const Step& s, const char* in, char* out, const Reduction& red, int nranks) {
  if (s.reduce) return executeStep(mem, s, in, out, 0, s.bytes, red, nranks);
  const char* src = in ? in : s.local;
  if (out) memcpy(out, src, s.bytes);
  if (s.dst && s.dst != src) memcpy(s.dst, src, s.bytes);
}

// Whether the message a step greets its input stream with is all there,
// read where the stream's next bytes lie (Conn::recvAhead) by its seq word
// (kSeqWhole, written last): the fifo's head, another line the writer
// stores to, is then not read at all.  Only a whole descriptor that matches
// ours counts; anything else (bytes not come, a message the engine wrote, a
// stale one, a mismatch) leaves the reading to the head, as before.  *ip:
// the message's first byte (its padding).
[[gnu::always_inline]] inline bool foundAhead(const Stream& c, const OpDesc& desc, size_t bytes, size_t skip,
                                              const char** ip) {
  if (c.recvAhead(ip) < bytes) return false;
  const char* d = *ip + skip;
  if (wholeSeq(d) != (desc.seq | kSeqWhole) || !descMatches(desc, descAt(d))) return false;
  c.recvFound(*ip, bytes);
  return true;
}

// The descriptors the stream owes (Conn::owed), consumed while each lies
// whole at the stream's next record (foundAhead): true once none is owed.
// Anything else (one not come, one the engine wrote, a mismatch) is for
// peekPast to read.
bool payOwedWhole(const Stream& st, Conn* in) {
  while (!in->owed.empty()) {
    const size_t skip = alignUp(st.recvPos(), st.recordAlign()), n = skip + sizeof(OpDesc);
    const char* ip;
    if (!foundAhead(st, in->owed.front(), n, skip, &ip)) return false;
    st.recvConsume(n);
    in->owed.pop();
  }
  return true;
}

// Whether a whole message with our sequence number lies where the stream's
// next record will (its descriptor may still differ: a mismatch).
bool oursAhead(const Stream& st, const OpDesc& mine, size_t n, size_t skip) {
  const char* ip;
  return st.recvAhead(&ip) >= n && wholeSeq(ip + skip) == (mine.seq | kSeqWhole);
}

// hear() for the path: the owed descriptors, then ours, found whole where
// they lie.  A stream that can owe one more and shows nothing of ours there
// is not read further: the check is owed (phaseThrough) and made by a later
// read (payOwedWhole, peekPast, ternCommDestroy), as a deferrable hear
// allows.  Reading its head instead cost the sender a cache line the peer
// writes with every greet: a cross-core transfer on its path per call.
// While the stream owes some and can owe more, it is not read at all: the
// owed checks are read together once the queue is full (lines in a row,
// which the peer has long finished writing), not one line the peer has just
// written per call (2-rank 8-64 B broadcast 0.83-0.87x the time, 10
// interleaved rounds; a mismatch owed is found at the same point as before,
// when the queue fills, and one on an empty queue still at once).
// Whatever else is there (a mismatch, a message the engine wrote, a full
// owed queue) is hear()'s.
Heard hearWhole(Conn* in, const OpDesc& mine, OpDesc* theirs) {
  if (!in->owed.empty() && !in->owed.full()) return Heard::kNotYet;
  const Stream st(in);
  if (!payOwedWhole(st, in)) return in->owed.full() ? hear(in, mine, theirs) : Heard::kNotYet;
  const size_t skip = alignUp(st.recvPos(), st.recordAlign()), n = skip + sizeof(OpDesc);
  const char* ip;
  if (foundAhead(st, mine, n, skip, &ip)) {
    st.recvConsume(n);
    return Heard::kMatched;
  }
  return in->owed.full() || oursAhead(st, mine, n, skip) ? hear(in, mine, theirs) : Heard::kNotYet;
}

// One step, whole: kWait while the peer's message has not all arrived,
// kEngine when the engine must carry it (see the top).  `greetIn` / `greetOut`:
// the operation's first use of the step's input / output stream, so its
// descriptor leads the message.
[[gnu::always_inline]] inline Try moveWhole(const Step& s, const OpDesc& desc, bool greetIn, bool greetOut, const MemOps& mem,
              const Reduction& red, int nranks) {
  const char* in = nullptr;
  Head hi{0, 0}, ho{0, 0};
  const Stream sin(s.in), sout(s.out);
  if (sin) {
    if (greetIn && !payOwedWhole(sin, s.in)) {  // the descriptors it owes come first
      OpDesc due;
      bool mismatch;
      if (!peekPast(s.in, &due, &mismatch)) return Try::kWait;
      if (mismatch) return Try::kEngine;
    }
    hi = headOf(sin.recordAlign(), sin.recvPos(), !greetIn);
    const char* ip;
    if (!(hi.desc && s.in->owed.empty() && foundAhead(sin, desc, hi.bytes() + s.bytes, hi.skip, &ip))) {
      if (sin.recvAvail(&ip) < hi.bytes() + s.bytes) return Try::kWait;
      if (hi.desc && !descMatches(desc, descAt(ip + hi.skip))) return Try::kEngine;
    }
    in = ip + hi.bytes();
  }
  char* out = nullptr;
  if (sout) {
    ho = headOf(sout.recordAlign(), sout.sendPos(), !greetOut);
    char* o;
    if (sout.sendSpace(&o) < ho.bytes() + s.bytes) return Try::kEngine;
    if (ho.desc) putWholeDesc(o + ho.skip, desc);  // its seq word last (markWhole, below)
    out = o + ho.bytes();
  }
  if (s.bytes) runWhole(mem, s, in, out, red, nranks);
  if (ho.desc) markWhole(out - sizeof(OpDesc), desc.seq);
  if (sin) sin.recvConsume(hi.bytes() + s.bytes);
  if (sout) sout.sendCommit(ho.bytes() + s.bytes);
  return Try::kDone;
}

// The marks advance() leaves on a stream it greeted (readDesc, claimOut), so
// the engine finds the streams of a handed-over operation as it would have.
void markIn(Operation& op, Conn* c) {
  op.greetedIn.push_back(c);
  c->reader = &op;
  op.held.push_back(c);
}
void markOut(Operation& op, Conn* c) {
  op.greetedOut.push_back(c);
  c->writer = &op;
  op.held.push_back(c);
}

// Which streams a call has greeted (its descriptor went first on them): an
// operation's lists, or (OpFree) the small path's own, without an operation.
struct OpBook {
  Operation& op;
  bool greetIn(const Step& s) const { return s.in && !op.greetedInFrom(s.in); }
  bool greetOut(const Step& s) const { return s.out && !op.greetedOutTo(s.out); }
  void noteIn(Conn* c) { markIn(op, c); }
  void noteOut(Conn* c) { markOut(op, c); }
};
struct FreeBook {
  AloneGreetings& g;
  static bool has(const Conn* const* v, size_t n, const Conn* c) { return std::find(v, v + n, c) != v + n; }
  bool greetIn(const Step& s) const { return s.in && !has(g.in, g.nIn, s.in); }
  bool greetOut(const Step& s) const { return s.out && !has(g.out, g.nOut, s.out); }
  void noteIn(Conn* c) { g.in[g.nIn++] = c; }
  void noteOut(Conn* c) { g.out[g.nOut++] = c; }
};
// ... or (Phase::fixedGreets) the steps' own marks, with nothing to note
// while it runs: a hand-over reads them back (greetedBefore).
struct FixedBook {
  static bool greetIn(const Step& s) { return s.greetsIn; }
  static bool greetOut(const Step& s) { return s.greetsOut; }
  static void noteIn(Conn*) {}
  static void noteOut(Conn*) {}
};

// Marks each step of a whole phase that is its program's first use of a
// stream (Step::greetsIn / greetsOut); false when a stream serves two
// programs in one direction, where which greets first depends on how they
// run (FreeBook's case).
bool fixGreetings(Phase& ph) {
  std::vector<const Conn*> ins, outs;  // planned once per kept plan: not on the call's path
  for (Program& p : ph.progs) {
    const size_t in0 = ins.size(), out0 = outs.size();
    for (Step& s : p.steps) {
      if (s.deferrable) continue;  // a descriptor heard greets nothing (tryStep)
      auto first = [&](std::vector<const Conn*>& seen, size_t mine, const Conn* c, bool* greets) {
        if (!c) return true;
        auto at = std::find(seen.begin(), seen.end(), c);
        if (at != seen.end() && static_cast<size_t>(at - seen.begin()) < mine) return false;  // another program's
        *greets = at == seen.end();
        if (*greets) seen.push_back(c);
        return true;
      };
      if (!first(ins, in0, s.in, &s.greetsIn) || !first(outs, out0, s.out, &s.greetsOut)) return false;
    }
  }
  return true;
}

// The streams a whole phase with fixed greetings has greeted so far.
void greetedBefore(const Phase& ph, AloneGreetings& g) {
  for (const Program& p : ph.progs)
    for (size_t i = 0; i < p.cur; ++i) {
      const Step& s = p.steps[i];
      if (s.greetsIn) g.in[g.nIn++] = s.in;
      if (s.greetsOut) g.out[g.nOut++] = s.out;
    }
}

// The current step of `p`, whole.
template <class Book>
[[gnu::always_inline]] inline Try tryStep(Book& book, Program& p, const OpDesc& desc, const MemOps& mem, const Reduction& red, int nranks) {
  const Step& s = p.steps[p.cur];
  if (s.deferrable) {  // the peer's descriptor, if it came (else owed: phaseThrough)
    OpDesc theirs;
    Heard h = hearWhole(s.in, desc, &theirs);
    if (h == Heard::kNotYet) return Try::kWait;
    if (h != Heard::kMatched) return Try::kEngine;
    ++p.cur;
    return Try::kDone;
  }
  const bool greetIn = book.greetIn(s), greetOut = book.greetOut(s);
  Try t = moveWhole(s, desc, greetIn, greetOut, mem, red, nranks);
  if (t != Try::kDone) return t;
  if (greetIn) book.noteIn(s.in);
  if (greetOut) book.noteOut(s.out);
  ++p.cur;
  return Try::kDone;
}

// Every program's steps as far as they go now; *done once all are through.
template <class Book>
[[gnu::always_inline]] inline Try runPhase(Book& book, Phase& ph, const OpDesc& desc, const MemOps& mem, int nranks, bool* done) {
  bool moved = false, all = true;
  for (Program& p : ph.progs) {
    while (!p.done()) {
      Try t = tryStep(book, p, desc, mem, ph.red, nranks);
      if (t == Try::kEngine) return t;
      if (t == Try::kWait) break;
      moved = true;
    }
    all &= p.done();
  }
  *done = all || phaseThrough(ph, desc);  // (all done: nothing to owe)
  return moved || *done ? Try::kDone : Try::kWait;
}

Try runPhase(Operation& op, bool* done) {
  OpBook book{op};
  return runPhase(book, op.phase, op.desc, *op.ctx.mem, op.ctx.nranks, done);
}

// A wait on the peer that lasts: the engine backs off and watches the
// timeout.  Also when another thread wants the token or issued work.
class Patience {
 public:
  Patience(const std::atomic<int>& want, const std::atomic<bool>& pending) : want_(want), pending_(pending) {}
  void moved() { since_ = 0, spins_ = 0; }
  bool exhausted() {
    if (since_ == 0) since_ = __rdtsc();
    if (__rdtsc() - since_ > kSpinCycles || want_.load(std::memory_order_relaxed) < kLevels ||
        pending_.load(std::memory_order_relaxed))
      return true;
    // As the engine's idleWait: a short spin, then yields, so a peer that
    // shares our core (more ranks than cores) runs.  Pausing through the
    // whole budget cost 4 ranks on 2 cores 6 -> 20 us per allreduce.
    if (++spins_ < kSpinPauses) _mm_pause();
    else sched_yield();
    return false;
  }

 private:
  const std::atomic<int>& want_;
  const std::atomic<bool>& pending_;
  uint64_t since_ = 0;
  unsigned spins_ = 0;
};

}  // namespace

bool Executor::claimIdle() {
  if (!drive_.try_lock()) return false;
  if (outstanding_.load() == 0 && standing_.load() == 0 && !anyPending_.load()) return true;
  drive_.unlock();
  return false;
}

// Plans the operation's next phase: kRun when the path can run it, kEngine
// when the engine must, kFinished when the operation is complete (done, or
// failed by its task).
Executor::Next Executor::nextAlonePhase(Operation& op) {
  resetPhase(op.phase);
  bool more = false;
  ternResult_t r = op.task->next(op.ctx, &op.phase, &more);
  if (r != ternSuccess) {
    failAll(r, lastThreadError());
    complete(op, r, lastThreadError());
    return Next::kFinished;
  }
  if (!more) {
    complete(op, ternSuccess, std::string());
    aloneDone_.store(aloneDone_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return Next::kFinished;
  }
  return runsWhole(op.phase, op.desc.count * typeSize(static_cast<ternDataType_t>(op.desc.dtype)))
             ? Next::kRun
             : Next::kEngine;
}

bool Executor::runAlone(const std::vector<OpPtr>& ops) {
  outstanding_.fetch_add(static_cast<int>(ops.size()));
  bool engine = false;
  for (const OpPtr& op : ops) {  // every first phase is planned, even when one needs the engine
    noteInUse(op->level);       // less urgent levels bound their kernel queues meanwhile
    op->begun = true;
    if (!op->collective && !op->send) op->desc.seq = nextRecvSeq(*op);
    engine |= nextAlonePhase(*op) == Next::kEngine;
  }
  // Every unfinished operation's phase as far as it goes now: kEngine when
  // one needs the engine, else whether anything moved, and *all when every
  // operation is complete.
  auto round = [&](bool* all) {
    bool moved = false;
    *all = true;
    for (const OpPtr& op : ops) {
      if (op->done.load(std::memory_order_relaxed)) continue;
      bool phaseDone = false;
      Try t = runPhase(*op, &phaseDone);
      if (t == Try::kEngine) return t;
      moved |= t == Try::kDone;
      Next x = phaseDone ? nextAlonePhase(*op) : Next::kRun;
      if (x == Next::kEngine) return Try::kEngine;
      *all &= x == Next::kFinished;
    }
    return moved ? Try::kDone : Try::kWait;
  };
  Patience patience(wantLevel_, anyPending_);
  for (bool all = false; !engine && !all;) {
    Try t = round(&all);
    if (t == Try::kDone) patience.moved();
    engine = t == Try::kEngine || (t == Try::kWait && !all && patience.exhausted());
  }
  if (!engine) {
    releaseHeld();
    return true;
  }
  // Every unfinished operation goes to the engine as it stands; the token
  // stays held for the last of them, which the caller waits for first
  // (api/group.cc's waitAll) and so drives them all.
  const Operation* last = nullptr;
  for (const OpPtr& op : ops)
    if (!op->done.load(std::memory_order_relaxed)) {
      handOver(op, "a late peer, a message it cannot take whole, a descriptor to check, or other work");
      last = op.get();
    }
  heldFor_.store(last, std::memory_order_relaxed);
  if (!last) releaseHeld();  // (all finished while the last round handed nothing)
  return last == nullptr;
}

size_t Executor::runStepsAlone(const OpDesc& desc, const Step* steps, size_t n, const Reduction& red,
                               int nranks, const MemOps& mem, size_t* whole) {
  noteInUse(desc.level);
  const uint64_t bytes = desc.count * typeSize(static_cast<ternDataType_t>(desc.dtype));
  Patience patience(wantLevel_, anyPending_);
  for (size_t i = 0; i < n; ++i, patience.moved()) {
    const Step& s = steps[i];
    if (i >= *whole) {  // once per step kept (as Phase::whole), not on every turn of its wait
      if (!takesWhole(s, bytes)) return i;
      *whole = i + 1;
    }
    for (;;) {
      Try t = moveWhole(s, desc, s.in != nullptr, s.out != nullptr, mem, red, nranks);
      if (t == Try::kDone) break;
      if (t == Try::kEngine || patience.exhausted()) return i;
    }
  }
  finishAlone();
  return n;
}

bool Executor::runTransfersAlone(const OpDesc* descs, const Step* steps, size_t n, int nranks,
                                 const MemOps& mem, bool* whole, bool* done) {
  std::fill(done, done + n, false);
  for (size_t i = 0; i < n; ++i)
    if (i == 0 || descs[i].level != descs[i - 1].level) noteInUse(descs[i].level);
  for (size_t i = 0; !*whole && i < n; ++i) {  // once for steps kept (as Phase::whole)
    const uint64_t bytes = descs[i].count * typeSize(static_cast<ternDataType_t>(descs[i].dtype));
    if (!takesWhole(steps[i], bytes)) return false;  // nothing moved yet: all go to the engine
  }
  *whole = true;
  size_t left = n;
  Patience patience(wantLevel_, anyPending_);
  while (left > 0) {
    bool moved = false;
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      const Step& s = steps[i];
      Try t = moveWhole(s, descs[i], s.in != nullptr, s.out != nullptr, mem, Reduction{}, nranks);
      if (t == Try::kEngine) return false;
      if (t == Try::kWait) continue;
      done[i] = moved = true;
      --left;
      host_.onComplete();
      aloneDone_.store(aloneDone_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    if (moved) patience.moved();
    else if (patience.exhausted()) return false;
  }
  releaseHeld();
  return true;
}

bool Executor::runPhaseAlone(const OpDesc& desc, Phase& ph, const MemOps& mem, int nranks,
                             AloneGreetings& g) {
  noteInUse(desc.level);
  if (!ph.whole) {
    if (!(ph.whole = fitsGreetings(ph) &&
                     runsWhole(ph, desc.count * typeSize(static_cast<ternDataType_t>(desc.dtype)))))
      return false;
    ph.fixedGreets = fixGreetings(ph);
  }
  if (ph.fixedGreets) {
    FixedBook book;
    if (runWholePhase(book, desc, ph, mem, nranks)) return true;
    greetedBefore(ph, g);
    return false;
  }
  FreeBook book{g};
  return runWholePhase(book, desc, ph, mem, nranks);
}

template <class Book>
bool Executor::runWholePhase(Book& book, const OpDesc& desc, Phase& ph, const MemOps& mem, int nranks) {
  Patience patience(wantLevel_, anyPending_);
  for (bool done = false; !done;) {
    Try t = runPhase(book, ph, desc, mem, nranks, &done);
    if (t == Try::kEngine) return false;
    if (t == Try::kDone) patience.moved();
    else if (patience.exhausted()) return false;
  }
  finishAlone();
  return true;
}

// A call done without an operation: counted, the token let go.
void Executor::finishAlone() {
  host_.onComplete();
  aloneDone_.store(aloneDone_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  releaseHeld();
}

// A handed-over operation's phase, planned again (the path ran the same
// plan): an error when the plan differs from the one run.
ternResult_t Executor::replan(Operation& op, bool (*same)(const Phase& planned, const void* ran),
                              const void* ran) {
  outstanding_.fetch_add(1);  // as runAlone's: handOver and complete count it off
  op.begun = true;
  resetPhase(op.phase);
  bool more = false;
  ternResult_t r = op.task->next(op.ctx, &op.phase, &more);
  if (r == ternSuccess && !(more && same(op.phase, ran)))
    r = setError(ternInternalError, "small path: the plan handed over is not the one run");
  return r;
}

// To the engine, the token held for it; or failed, the token let go.
void Executor::settleHandOver(const OpPtr& op, ternResult_t r) {
  if (r == ternSuccess) {
    handOver(op, "a late peer, a message it cannot take whole, or a descriptor to check");
    heldFor_.store(op.get(), std::memory_order_relaxed);
    return;
  }
  failAll(r, lastThreadError());
  complete(*op, r, lastThreadError());
  releaseHeld();
}

void Executor::handOverPhase(const OpPtr& opp, const Phase& ran, const AloneGreetings& g) {
  Operation& op = *opp;
  auto same = [](const Phase& planned, const void* v) {
    const Phase& ran = *static_cast<const Phase*>(v);
    bool eq = planned.progs.size() == ran.progs.size();
    for (size_t i = 0; eq && i < ran.progs.size(); ++i) eq = planned.progs[i].steps.size() == ran.progs[i].steps.size();
    return eq;
  };
  ternResult_t r = replan(op, same, &ran);
  if (r == ternSuccess) {
    for (size_t i = 0; i < ran.progs.size(); ++i) op.phase.progs[i].cur = ran.progs[i].cur;
    for (size_t i = 0; i < g.nIn; ++i) markIn(op, const_cast<Conn*>(g.in[i]));
    for (size_t i = 0; i < g.nOut; ++i) markOut(op, const_cast<Conn*>(g.out[i]));
  }
  settleHandOver(opp, r);
}

void Executor::handOverAt(const OpPtr& opp, size_t done) {
  Operation& op = *opp;
  auto same = [](const Phase& planned, const void* v) {
    return planned.progs.size() == 1 && planned.progs[0].steps.size() >= *static_cast<const size_t*>(v);
  };
  ternResult_t r = replan(op, same, &done);
  if (r == ternSuccess)
    for (Program& p = op.phase.progs[0]; p.cur < done; ++p.cur) {  // every step greets its stream (runStepsAlone)
      const Step& s = p.steps[p.cur];
      if (s.in) markIn(op, s.in);
      if (s.out) markOut(op, s.out);
    }
  settleHandOver(opp, r);
}

// The operation joins its level's list as it stands (its phase planned, the
// steps done so far done); the token stays held (heldFor_: wait() drives).
void Executor::handOver(const OpPtr& op, const char* why) {
  TERN_LOG(Trace, "small path: %s goes to the engine (%s)", describe(op->desc).c_str(), why);
  aloneHanded_.store(aloneHanded_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  outstanding_.fetch_sub(1);  // admitHeld counts it again
  op->waiter = Operation::Waiter::kDrives;  // the blocking caller waits for it now (wait())
  admitHeld(op);
  ternResult_t r = adoptPhase(*op);
  if (r != ternSuccess) failAll(r, lastThreadError());
}

}  // namespace tern
