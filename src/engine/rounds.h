// One round over the levels, and the wait between rounds that moved nothing.
// After every round the driver serves the most urgent ready work first:
// levels are visited from 0 (most urgent) to 7, and a level whose operations
// moved ends the round, so less urgent levels get the CPU only while the
// urgent ones wait on their peers.  A 4 MiB urgent allreduce issued behind a
// 256 MiB bulk one therefore overtakes it at the next chunk.  Less urgent
// levels also stay off the links while a more urgent level is busy (it moved
// within TERN_PRIORITY_HOLD_US: the hold, see round()).
#pragma once
#include "engine/drive_token.h"
#include "engine/health.h"
#include "engine/stepper.h"

namespace tern {

class Rounds {
 public:
  Rounds(double holdSec, Admission& admission, Levels& levels, Stepper& stepper, Health& health, Waits& waits,
         const DriveToken& token);
  // One round (the drive token held): true when something moved.
  bool round();
  // Backs off from spinning to yielding to sleeping in poll() after `idle`
  // rounds that moved nothing; `op`: what the driver drives for (nullptr:
  // the progress thread).
  void idleWait(unsigned& idle, const Operation* op);

 private:
  bool visit(Levels::List& list, size_t budget, bool* moved, bool* pumped);
  void poll(const Operation* op);

  const Clock::duration hold_;
  Admission& admission_;
  Levels& levels_;
  Stepper& stepper_;
  Health& health_;
  Waits& waits_;
  const DriveToken& token_;
  Clock::time_point heldUntil_{};  // less urgent levels wait until then (round())
  // The first level the last round held back (kLevels: none held); idleWait
  // leaves that level and the ones below it out of its poll until heldUntil_.
  int heldFrom_ = kLevels;
};

}  // namespace tern
