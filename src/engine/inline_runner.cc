// The inline runner (the small path): a blocking caller's operation on an
// idle engine, carried out on the caller's thread with whole messages
// (whole_message.h) and no rounds.
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

#include "base/error.h"
#include "base/log.h"
#include "engine/inline_runner.h"
#include "engine/stream_claims.h"
#include "engine/whole_message.h"
#include "engine/stream_marks.h"

namespace tern {

namespace {

using namespace whole;  // NOLINT: this file is whole_message.h's one reader

// How long a step waits for its peer here before the engine takes over (its
// wait backs off to yielding and sleeping, and it watches the timeout):
// about 10 us, a few times a small operation's whole round trip.
constexpr uint64_t kSpinCycles = 30000;

// Whether AloneGreetings has room for every stream the phase may greet.
bool fitsGreetings(const Phase& ph) {
  size_t steps = 0;
  for (const Program& p : ph.progs) steps += p.steps.size();
  return steps <= AloneGreetings::kMax;
}

// The marks advance() leaves on a stream it greeted (readDesc, claimOut), so
// the engine finds the streams of a handed-over operation as it would have.
void markIn(Operation& op, Conn* c) {
  op.greetedIn.push_back(c);
  marks(c).reader = &op;
  op.held.push_back(c);
}
void markOut(Operation& op, Conn* c) {
  op.greetedOut.push_back(c);
  marks(c).writer = &op;
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
      // The phase's reduction: runsWhole left no program here that reduces otherwise.
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
  Patience(const DriveToken& token, const Admission& admission) : token_(token), admission_(admission) {}
  void moved() { since_ = 0, spins_ = 0; }
  bool exhausted() {
    if (since_ == 0) since_ = __rdtsc();
    if (__rdtsc() - since_ > kSpinCycles || token_.anyWants() || admission_.anyPendingNow())
      return true;
    // As the engine's idleWait: a short spin, then yields, so a peer that
    // shares our core (more ranks than cores) runs.  Pausing through the
    // whole budget cost 4 ranks on 2 cores 6 -> 20 us per allreduce.
    if (++spins_ < kSpinPauses) _mm_pause();
    else sched_yield();
    return false;
  }

 private:
  const DriveToken& token_;
  const Admission& admission_;
  uint64_t since_ = 0;
  unsigned spins_ = 0;
};

}  // namespace

bool InlineRunner::claimIdle() {
  if (!token_.tryTake()) return false;
  if (admission_.outstanding() == 0 && admission_.standing() == 0 && !admission_.anyPending()) return true;
  token_.letGo();
  return false;
}

// Plans the operation's next phase: kRun when the path can run it, kEngine
// when the engine must, kFinished when the operation is complete (done, or
// failed by its task).
InlineRunner::Next InlineRunner::nextAlonePhase(Operation& op) {
  resetPhase(op.phase);
  bool more = false;
  ternResult_t r = op.task->next(op.ctx, &op.phase, &more);
  if (r != ternSuccess) {
    stepper_.failAll(r, lastThreadError());
    stepper_.complete(op, r, lastThreadError());
    return Next::kFinished;
  }
  if (!more) {
    stepper_.complete(op, ternSuccess, std::string());
    countDone();
    return Next::kFinished;
  }
  return runsWhole(op.phase, payloadBytes(op.desc))
             ? Next::kRun
             : Next::kEngine;
}

bool InlineRunner::runAlone(const std::vector<OpPtr>& ops) {
  admission_.count(static_cast<int>(ops.size()));
  bool engine = false;
  for (const OpPtr& op : ops) {  // every first phase is planned, even when one needs the engine
    levels_.noteInUse(op->level);       // less urgent levels bound their kernel queues meanwhile
    op->begun = true;
    if (!op->collective && !op->send) op->desc.seq = levels_.nextRecvSeq(*op);
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
  Patience patience(token_, admission_);
  for (bool all = false; !engine && !all;) {
    Try t = round(&all);
    if (t == Try::kDone) patience.moved();
    engine = t == Try::kEngine || (t == Try::kWait && !all && patience.exhausted());
  }
  if (!engine) {
    stepper_.releaseToken(token_);
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
  token_.holdFor(last);
  if (!last) stepper_.releaseToken(token_);  // (all finished while the last round handed nothing)
  return last == nullptr;
}

size_t InlineRunner::runStepsAlone(const OpDesc& desc, const Step* steps, size_t n, const Reduction& red,
                               int nranks, const MemOps& mem, size_t* whole) {
  levels_.noteInUse(desc.level);
  const uint64_t bytes = payloadBytes(desc);
  Patience patience(token_, admission_);
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

bool InlineRunner::runTransfersAlone(const OpDesc* descs, const Step* steps, size_t n, int nranks,
                                 const MemOps& mem, bool* whole, bool* done) {
  std::fill(done, done + n, false);
  for (size_t i = 0; i < n; ++i)
    if (i == 0 || descs[i].level != descs[i - 1].level) levels_.noteInUse(descs[i].level);
  for (size_t i = 0; !*whole && i < n; ++i) {  // once for steps kept (as Phase::whole)
    const uint64_t bytes = payloadBytes(descs[i]);
    if (!takesWhole(steps[i], bytes)) return false;  // nothing moved yet: all go to the engine
  }
  *whole = true;
  size_t left = n;
  Patience patience(token_, admission_);
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
      countDone();
    }
    if (moved) patience.moved();
    else if (patience.exhausted()) return false;
  }
  stepper_.releaseToken(token_);
  return true;
}

bool InlineRunner::runPhaseAlone(const OpDesc& desc, Phase& ph, const MemOps& mem, int nranks,
                             AloneGreetings& g) {
  levels_.noteInUse(desc.level);
  if (!ph.whole) {
    if (!(ph.whole = fitsGreetings(ph) &&
                     runsWhole(ph, payloadBytes(desc))))
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
bool InlineRunner::runWholePhase(Book& book, const OpDesc& desc, Phase& ph, const MemOps& mem, int nranks) {
  Patience patience(token_, admission_);
  for (bool done = false; !done;) {
    Try t = runPhase(book, ph, desc, mem, nranks, &done);
    if (t == Try::kEngine) return false;
    if (t == Try::kDone) patience.moved();
    else if (patience.exhausted()) return false;
  }
  finishAlone();
  return true;
}

void InlineRunner::countDone() { done_.store(done_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

// A call done without an operation: counted, the token let go.
void InlineRunner::finishAlone() {
  countDone();
  stepper_.releaseToken(token_);
}

// A handed-over operation's phase, planned again (the path ran the same
// plan): an error when the plan differs from the one run.
ternResult_t InlineRunner::replan(Operation& op, bool (*same)(const Phase& planned, const void* ran),
                              const void* ran) {
  admission_.count(1);  // as runAlone's: handOver and complete count it off
  op.begun = true;
  resetPhase(op.phase);
  bool more = false;
  ternResult_t r = op.task->next(op.ctx, &op.phase, &more);
  if (r == ternSuccess && !(more && same(op.phase, ran)))
    r = setError(ternInternalError, "small path: the plan handed over is not the one run");
  return r;
}

// To the engine, the token held for it; or failed, the token let go.
void InlineRunner::settleHandOver(const OpPtr& op, ternResult_t r) {
  if (r == ternSuccess) {
    handOver(op, "a late peer, a message it cannot take whole, or a descriptor to check");
    token_.holdFor(op.get());
    return;
  }
  stepper_.failAll(r, lastThreadError());
  stepper_.complete(*op, r, lastThreadError());
  stepper_.releaseToken(token_);
}

void InlineRunner::handOverPhase(const OpPtr& opp, const Phase& ran, const AloneGreetings& g) {
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

void InlineRunner::handOverAt(const OpPtr& opp, size_t done) {
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
// steps done so far done); the token stays held for it (DriveToken::holdFor: wait() drives).
void InlineRunner::handOver(const OpPtr& op, const char* why) {
  TERN_LOG(Trace, "small path: %s goes to the engine (%s)", describe(op->desc).c_str(), why);
  handed_.store(handed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  admission_.count(-1);  // admitHeld counts it again
  op->waiter = Operation::Waiter::kDrives;  // the blocking caller waits for it now (wait())
  stepper_.admitHeld(op);
  ternResult_t r = stepper_.adoptPhase(*op);
  if (r != ternSuccess) stepper_.failAll(r, lastThreadError());
}

}  // namespace tern
