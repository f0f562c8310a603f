// Health and timeouts: while nothing moves the driver asks its communicator
// (abort, an earlier failure, peers' liveness) and looks at every waiting
// operation: a stream blocked on a gone peer, a descriptor on the other
// stream of a pair (a mismatch), and operations idle for longer than
// TERN_TIMEOUT (a dead or stalled peer).  Also the descriptors connections
// still owe when the communicator closes (hearOwed).
#pragma once
#include <string>
#include <vector>

#include "engine/drive_token.h"
#include "engine/levels.h"

namespace tern {

// What the executor needs from its communicator (and nothing more).
class EngineHost {
 public:
  virtual ~EngineHost() = default;
  // Abort, an earlier failure (its code and sentence), peers' liveness.
  virtual ternResult_t checkHealth() = 0;
  // An operation failed: the communicator is failed from now on, peers are
  // told (sockets shut), `why` is the sentence every later call repeats.
  virtual void onFailure(ternResult_t r, const std::string& why) = 0;
  // The communicator's first failure, its code and sentence (`r` and `why`
  // unchanged when it has none with a sentence).
  virtual ternResult_t firstFailure(ternResult_t r, std::string* why) = 0;
};

class Health {
 public:
  Health(EngineHost& host, int rank, double timeoutSec) : host_(host), rank_(rank), timeoutSec_(timeoutSec) {}

  // A round moved something: nobody was watched meanwhile.
  void busyRound() { ++busyRounds_; }
  // After the n-th idle round in a row: the clock is read every 64 only, and
  // the first check comes 2 ms into a wait, so short waits stay free of both.
  ternResult_t afterIdleRounds(unsigned n, Levels& levels);
  // The same while the progress thread listens for standing operations.
  ternResult_t whenDue(Levels& levels, Clock::time_point now);
  // Hears what `conns` still owe (StreamMarks::owed) before they close: the
  // caller holds the drive token.
  ternResult_t hearOwed(const std::vector<Conn*>& conns, Clock::time_point deadline);
  Clock::time_point deadline() const;

 private:
  ternResult_t checkIdle(Clock::time_point now, Levels& levels);
  ternResult_t checkOp(Operation& op, Clock::time_point now, bool watched);
  ternResult_t hearOwedOn(Conn* c, Clock::time_point deadline);

  EngineHost& host_;
  const int rank_;
  const double timeoutSec_;
  Clock::time_point nextHealth_{};
  uint64_t busyRounds_ = 0;      // rounds that moved something
  uint64_t busyRoundsSeen_ = 0;  // busyRounds_ at checkIdle's last look
};

}  // namespace tern
