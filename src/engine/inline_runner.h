// The inline runner (the small path): a blocking caller's operations (one,
// or a group's transfers on distinct streams), or a call without an
// operation (a schedule of steps, a kept phase, a group's transfers), run on
// the caller's thread with whole messages and no rounds while the engine is
// idle (inline_runner.cc says why and when it hands over to the engine).
// claimIdle takes the drive token if nothing is admitted, pending or
// standing; the caller numbers its work while it holds it, so nothing issued
// later goes first.  Each run lets the token go once all is done, or leaves
// it held for the operations it handed to the engine as they stand (a late
// peer, a stream it cannot take whole, a descriptor to check): the caller's
// wait drives them from there (Executor::wait).
#pragma once
#include <atomic>
#include <vector>

#include "engine/drive_token.h"
#include "engine/inline_choice.h"
#include "engine/kept_plans.h"
#include "engine/stepper.h"

namespace tern {

// The streams a call on the small path greeted without an operation (its
// descriptor went first on them): handed to the operation if it must go to
// the engine.  Left uninitialised: only the first nIn / nOut are read.
struct AloneGreetings {
  static constexpr size_t kMax = 64;
  const Conn* in[kMax];
  const Conn* out[kMax];
  size_t nIn = 0, nOut = 0;
};

class InlineRunner {
 public:
  InlineRunner(DriveToken& token, Admission& admission, Levels& levels, Stepper& stepper)
      : token_(token), admission_(admission), levels_(levels), stepper_(stepper) {}

  // The drive token, if the engine is idle.
  bool claimIdle();
  // Operations, numbered while the token was held: true when all are
  // complete (the token let go), false when the unfinished ones were handed
  // to the engine.
  bool runAlone(const std::vector<OpPtr>& ops);
  // A schedule of steps without a plan (the recursive-doubling allreduce's),
  // each (connection, direction) used once, so every message carries the
  // descriptor: returns n once all are done (the token let go, the call
  // counted), else the step the engine must take over from (token still
  // held): handOverAt then plans `op` (in place: its plan repeats no local
  // work) and starts it at that step.  *whole: how many of the steps were
  // found to go whole before (kept by the caller with them); raised as more are.
  size_t runStepsAlone(const OpDesc& desc, const Step* steps, size_t n, const Reduction& red, int nranks,
                       const MemOps& mem, size_t* whole);
  void handOverAt(const OpPtr& op, size_t done);
  // A planned phase run without an operation (a plan that does no local
  // work, planPure): true once it is done (token let go, counted); false
  // when the engine must take over (token still held): handOverPhase then
  // plans `op` again and starts each program at the step `ran` reached.
  bool runPhaseAlone(const OpDesc& desc, Phase& ph, const MemOps& mem, int nranks, AloneGreetings& g);
  void handOverPhase(const OpPtr& op, const Phase& ran, const AloneGreetings& g);
  // A group's sends and receives without operations: each step one
  // transfer with its own descriptor, all progressing together.  True once
  // all are done (token let go, each counted); false when the engine must
  // take over (token still held): done[i] says which finished, and the
  // caller hands the others over as operations (handOverAt at step 0).
  // *whole: the steps were found to go whole before; set once they are.
  bool runTransfersAlone(const OpDesc* descs, const Step* steps, size_t n, int nranks, const MemOps& mem,
                         bool* whole, bool* done);
  // What it keeps between calls (the token's holder only).
  KeptPlans& kept() { return kept_; }
  // Calls it completed (each a completed operation in the communicator's
  // statistics: Executor::opsDone), and operations it handed to the engine.
  uint64_t done() const { return done_.load(std::memory_order_relaxed); }
  uint64_t handed() const { return handed_.load(std::memory_order_relaxed); }

 private:
  enum class Next { kRun, kEngine, kFinished };
  Next nextAlonePhase(Operation& op);
  template <class Book>
  bool runWholePhase(Book& book, const OpDesc& desc, Phase& ph, const MemOps& mem, int nranks);
  void countDone();
  void finishAlone();
  ternResult_t replan(Operation& op, bool (*same)(const Phase& planned, const void* ran), const void* ran);
  void settleHandOver(const OpPtr& op, ternResult_t r);
  void handOver(const OpPtr& op, const char* why);

  DriveToken& token_;
  Admission& admission_;
  Levels& levels_;
  Stepper& stepper_;
  KeptPlans kept_;
  std::atomic<uint64_t> done_{0}, handed_{0};  // the token's holder writes
};

}  // namespace tern
