// Health (health.h): idle checks, dead and stalled peers, timeouts, and
// the descriptors connections still owe at destroy.
#include "engine/health.h"

#include <thread>

#include "base/error.h"
#include "engine/descriptors.h"
#include "engine/phase_blockers.h"
#include "engine/stream_marks.h"

namespace tern {

ternResult_t Health::afterIdleRounds(unsigned n, Levels& levels) {
  if (n % 64 != 0) return ternSuccess;
  auto now = Clock::now();
  if (n == 64) {
    nextHealth_ = now + std::chrono::milliseconds(2);
    return ternSuccess;
  }
  return whenDue(levels, now);
}

ternResult_t Health::whenDue(Levels& levels, Clock::time_point now) {
  if (now < nextHealth_) return ternSuccess;
  ternResult_t r = checkIdle(now, levels);
  nextHealth_ = now + std::chrono::milliseconds(20);
  return r;
}

// Called while nothing moves: earlier failures, abort, dead peers, and
// operations that waited longer than TERN_TIMEOUT.
ternResult_t Health::checkIdle(Clock::time_point now, Levels& levels) {
  TERN_CHECK(host_.checkHealth());
  // Checks come only in idle rounds: rounds that moved since the last one
  // (other operations, or more urgent levels this one was held behind) mean
  // nobody was watched meanwhile, so nobody's idle time runs across them.
  // A gap with no round moved is idle time, however long: on a loaded host
  // a thread descheduled for 200 ms between checks once reset every clock,
  // and a 2 s timeout never fired.
  const bool watched = busyRounds_ == busyRoundsSeen_;
  busyRoundsSeen_ = busyRounds_;
  for (Levels::List& list : levels)
    for (size_t i = 0; i < list.size(); ++i) {
      Operation& op = *list[i];
      if ((!op.begun && !op.unbound()) || !levels.runnable(list, i) || op.phase.listening) continue;
      TERN_CHECK(checkOp(op, now, watched));
    }
  return ternSuccess;
}

// One waiting operation: a gone peer, a mismatch on the other stream, its timeout.
ternResult_t Health::checkOp(Operation& op, Clock::time_point now, bool watched) {
  if (op.begun && op.opening.empty()) TERN_CHECK(checkBlockedOnGone(op.phase, rank_, op.phase.what));
  if (op.begun) TERN_CHECK(checkOtherStream(op, op.phase));
  if (op.moves != op.movesSeen || !watched) {  // moved since the last check: idle from now
    op.movesSeen = op.moves;
    op.idleSince = now;
  }
  double waited = std::chrono::duration<double>(now - op.idleSince).count();
  if (waited <= timeoutSec_) return ternSuccess;
  return setError(ternTimeout, "rank " + std::to_string(rank_) + " made no progress in " +
                                   (op.unbound() ? "a receive from any source" : op.phase.what) + " for " +
                                   std::to_string((int)waited) + " s (TERN_TIMEOUT) waiting on rank(s) " +
                                   (op.unbound() ? "any" : blockedPeers(op.phase)) +
                                   ": dead or stalled peer?");
}

Clock::time_point Health::deadline() const {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeoutSec_));
}

// ternInvalidUsage for a mismatch, ternRemoteError when a live peer has not
// sent them by the deadline.
ternResult_t Health::hearOwed(const std::vector<Conn*>& conns, Clock::time_point deadline) {
  ternResult_t r = ternSuccess;
  for (size_t i = 0; i < conns.size() && r == ternSuccess; ++i) r = hearOwedOn(conns[i], deadline);
  return r;
}

// One connection's owed descriptors, read and checked as they arrive.
ternResult_t Health::hearOwedOn(Conn* c, Clock::time_point deadline) {
  const OwedDescs& owed = marks(c).owed;
  while (!owed.empty()) {
    bool moved = false;
    if (c->needsProgress()) TERN_CHECK(c->progress(&moved));
    OpDesc theirs;
    bool mismatch = false;
    if (peekPast(c, &theirs, &mismatch) && mismatch) return heardError(Heard::kOwedMismatch, c, theirs, theirs);
    if (owed.empty()) break;
    if (c->inputEnded() || Clock::now() > deadline) {
      // A peer that failed (a mismatch it saw first) said why; one that
      // left or stalled without answering did not make the same call.
      TERN_CHECK(host_.checkHealth());
      return setError(ternRemoteError, "rank " + std::to_string(c->peer) +
                                           (c->inputEnded() ? " exited without answering"
                                                            : " did not answer, within the timeout,") +
                                           " this rank's " + describe(owed.front()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return ternSuccess;
}

}  // namespace tern
