// One operation's way through the engine, a step at a time: it begins once
// its caller's stream is ready, its task plans it phase by phase, each
// phase's connections are opened and pumped, its programs advance within a
// byte budget, a finished plan settles its asynchronous memory, and it
// completes (or every admitted operation fails with the communicator).
#pragma once
#include <string>

#include "engine/admission.h"
#include "engine/drive_token.h"
#include "engine/health.h"
#include "engine/levels.h"
#include "engine/waits.h"

namespace tern {

class Trace;

class Stepper {
 public:
  Stepper(EngineHost& host, Admission& admission, Levels& levels, Waits& waits)
      : host_(host), admission_(admission), levels_(levels), waits_(waits) {}

  // TERN_TRACE (engine/trace.h): operations' begin and completion go there.
  void setTrace(Trace* t) { trace_ = t; }
  // Moves `op` by up to `budget` payload bytes per program.  *moved: its
  // steps moved data (or a phase began); *pumped: only its connections'
  // progress did something (for a transport whose progress is shared, one
  // UCX worker, maybe another operation's traffic); *finished: its plan is through.
  ternResult_t step(Operation& op, size_t budget, bool* moved, bool* pumped, bool* finished);
  // The phase's connections: pumped, or awaited while they open.
  ternResult_t adoptPhase(Operation& op);
  // Whether a finished plan's operation may complete (asynchronous memory settled).
  bool settled(Operation& op, ternResult_t* r);
  void complete(Operation& op, ternResult_t r, const std::string& err);
  // A failure fails the communicator and every admitted operation.
  void failAll(ternResult_t r, const std::string& why);
  // An operation admitted by the drive token's holder, straight into its
  // level's list (no pending list, no lock).
  void admitHeld(const OpPtr& op) {
    admission_.count(1);
    op->stamp = admission_.stamp();
    levels_.enlist(op);
  }
  // Lets go of the drive token; work left over (async requests, other
  // threads' calls issued meanwhile) goes on to the progress thread.
  void releaseToken(DriveToken& token) {
    token.letGo();
    if (admission_.outstanding() > 0) {
      waits_.notifyWork();
      waits_.wakeWaiters();
    }
  }
  // Lets go of the drive token as a caller whose operation (at `level`) is
  // done and who returns now; see stepper.cc for whom it leaves unwoken.
  void handBack(DriveToken& token, int level);
  // The pending operations into their level lists (every round).
  void admit() {
    admission_.take([this](const OpPtr& op) { levels_.enlist(op); });
  }

 private:
  ternResult_t begin(Operation& op, bool* finished);
  ternResult_t runPrograms(Operation& op, size_t budget, bool* moved, bool* done);
  ternResult_t pump(Operation& op, bool* pumped);
  ternResult_t beginPhase(Operation& op, bool* finished);
  ternResult_t adopt(Operation& op, Conn* k);
  ternResult_t awaitOpen(Operation& op);

  EngineHost& host_;
  Admission& admission_;
  Levels& levels_;
  Waits& waits_;
  Trace* trace_ = nullptr;
};

}  // namespace tern
