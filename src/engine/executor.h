// One executor per communicator runs every admitted operation; it composes
// the engine's parts, each with one job:
//   Admission    (admission.h)    what is submitted and not yet complete
//   Levels       (levels.h)       the active lists per level, issue order
//   DriveToken   (drive_token.h)  who drives, and who asks to
//   Rounds       (rounds.h)       one round over the levels, the hold, the idle wait
//   Stepper      (stepper.h)      one operation's phases, connections, completion
//   Health       (health.h)       dead and stalled peers, timeouts, owed checks
//   Waits        (waits.h)        sleepers, the work condition, the doorbell
//   InlineRunner (inline_runner.h) the small path on the caller's thread
//
// Who drives: whichever thread holds the drive token.  A blocking call on an
// idle communicator takes it and runs the rounds itself (no thread hand-off:
// small-message latency); otherwise the executor's progress thread drives
// and waiters sleep until their operation completes.
#pragma once
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/admission.h"
#include "engine/drive_token.h"
#include "engine/health.h"
#include "engine/inline_runner.h"
#include "engine/levels.h"
#include "engine/rounds.h"
#include "engine/stepper.h"
#include "engine/waits.h"

namespace tern {

class Trace;

class Executor {
 public:
  Executor(EngineHost& host, int rank, double timeoutSec, double holdSec);
  ~Executor();

  // Admits operations in issue order.  `wake`: nobody will wait on them
  // right away (async requests, groups over several communicators), so the
  // progress thread must drive them.
  void submit(const std::vector<OpPtr>& ops, bool wake);
  // Waits for `op`, driving progress on this thread while nobody else does.
  // Returns its result; *error gets its sentence.  `then`: an operation of
  // this engine the caller waits for next (a group's), for which a caller
  // that drove `op` to its end keeps the drive token instead of handing it
  // back (waking the progress thread only to take it back at once).
  ternResult_t wait(Operation& op, std::string* error, const Operation* then = nullptr);
  // Drives every admitted operation to completion (or failure).
  void drain();
  // Stops the progress thread (after drain).
  void stop();
  bool bindTo(const std::vector<int>& cpus);
  // A new operation for this communicator, from its pool of spare ones
  // (operation.h: a blocking call allocates nothing for it).
  OpPtr newOperation();
  // The next issue stamp (Admission::stamp).
  uint64_t stamp() { return admission_.stamp(); }
  bool idle() { return admission_.outstanding() == 0; }
  // TERN_TRACE (engine/trace.h): operations' begin and completion go there.
  void setTrace(Trace* t) { stepper_.setTrace(t); }
  // Of `streams`, those that still owe this rank descriptors to check
  // (StreamMarks::owed).
  static std::vector<Conn*> owing(const std::vector<Conn*>& streams);
  // Hears what `conns` still owe before they close (ternComm::hearOwed):
  // ternInvalidUsage for a mismatch, ternRemoteError when a live peer has
  // not sent them within the timeout.
  ternResult_t hearOwed(const std::vector<Conn*>& conns);
  // The small path's entry points (inline_runner.h): the drive token if
  // the engine is idle (the caller numbers its work while it holds it), then
  // its operations run on the caller's thread (InlineRunner::runAlone).  The
  // calls without an operation (comm/inline_calls.cc) use the runner itself.
  bool claimIdle() { return runner_.claimIdle(); }
  bool runAlone(const std::vector<OpPtr>& ops) { return runner_.runAlone(ops); }
  InlineRunner& inlineRunner() { return runner_; }
  // The sequence number of the next receive from `peer` at `level` (they
  // are numbered when they start: the token's holder only).
  uint64_t startRecv(int level, int peer, int nranks) { return levels_.startRecv(level, peer, nranks); }
  // Operations completed without failure (statistics), on the rounds or inline.
  uint64_t opsDone() const { return admission_.completed() + runner_.done(); }
  // Operations the small path completed, and those it handed to the engine.
  uint64_t smallPathDone() const { return runner_.done(); }
  uint64_t smallPathHanded() const { return runner_.handed(); }

 private:
  bool admitForCaller(const std::vector<OpPtr>& ops, bool wake);
  bool waitAsync(Operation& op);
  bool driveFor(Operation& op, const Operation* then, Clock::time_point* spinUntil);
  void loop();
  void listen();
  bool listenRounds();
  bool driveUntil(const Operation* op);  // false: it handed the token over
  bool driveHeld(const Operation* op, const Operation* then = nullptr);
  void failOn(ternResult_t r);

  EngineHost& host_;
  const int rank_;
  OpPool* const pool_;  // closed (not deleted) by ~Executor: OpPtrs may outlive it
  Waits waits_;
  Admission admission_{waits_.lock()};
  Levels levels_;
  DriveToken token_;
  Health health_;
  Stepper stepper_{host_, admission_, levels_, waits_};
  Rounds rounds_;
  InlineRunner runner_{token_, admission_, levels_, stepper_};
  std::atomic<bool> stopping_{false};  // stop(): set under waits_.lock()
  unsigned idleRounds_ = 0;
  Clock::time_point lastListenMove_{};  // listen(): when a standing operation last moved
  std::thread thread_;
};

}  // namespace tern
