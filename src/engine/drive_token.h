// The drive token: whichever thread holds it runs the engine's rounds (or
// the inline runner's steps).  It is only ever tried, never waited for.  A
// caller whose operation is more urgent than what is driven asks for it
// (ask); the holder lets go at its next round (wanted), so the urgent
// caller's thread runs the rounds itself instead of waiting for a wake-up
// on a busy CPU (the progress thread drives for no level).
#pragma once
#include <atomic>

#include "base/spin_lock.h"
#include "engine/operation.h"

namespace tern {

constexpr int kLevels = TERN_PRIORITY_LEVELS;

class DriveToken {
 public:
  bool tryTake() { return drive_.try_lock(); }
  void letGo() { drive_.unlock(); }
  // Asks for the token for work at `level`: true when nothing as urgent had
  // asked yet (then the driver should be rung).
  bool ask(int level) {
    int want = want_.load();
    while (level < want && !want_.compare_exchange_weak(want, level)) {
    }
    return level < want;
  }
  // Whether a waiter wants the token for work more urgent than `op`'s
  // (nullptr: the progress thread, which drives for no level).
  bool wanted(const Operation* op) const {
    return want_.load(std::memory_order_relaxed) < (op ? op->level : kLevels);
  }
  bool anyWants() const { return want_.load(std::memory_order_relaxed) < kLevels; }
  void answered() { want_.store(kLevels); }
  // The operation whose blocking caller took the token in submit() and
  // drives it in wait() (Executor::admitForCaller); written by the holder.
  void holdFor(const Operation* op) { heldFor_.store(op, std::memory_order_relaxed); }
  bool heldFor(const Operation* op) const { return heldFor_.load(std::memory_order_relaxed) == op; }

 private:
  SpinLock drive_;
  std::atomic<int> want_{kLevels};  // the most urgent level a waiter asked for (kLevels: none)
  std::atomic<const Operation*> heldFor_{nullptr};
};

}  // namespace tern
