// The drive token: whichever thread holds it runs the engine's rounds (or
// the inline runner's steps).  It is only ever tried, never waited for.  A
// caller whose operation is more urgent than what is driven asks for it
// (ask); the holder lets go at its next round (wanted), so the urgent
// caller's thread runs the rounds itself instead of waiting for a wake-up
// on a busy CPU (the progress thread drives for no level).
//
// The hand-over is directed: until the asker takes the token (served), no
// thread driving for a less urgent level takes it (tryTakeAt).  Otherwise the
// holder that let go took it back at its next try whenever the asker had no
// core at that moment: with 3 busy threads per rank on 2 cores, an urgent
// caller waited for a bulk caller's rounds that way.  An ask lasts kAskLasts
// unless renewed (a waiter renews it at every turn of its wait), so one whose
// asker left without taking the token holds nobody back for long.
#pragma once
#include <atomic>
#include <chrono>

#include "base/spin_lock.h"
#include "engine/operation.h"

namespace tern {

constexpr int kLevels = TERN_PRIORITY_LEVELS;

class DriveToken {
 public:
  static constexpr int64_t kAskLasts = 20 * 1000 * 1000;  // ns; a waiter renews its ask every few ms
  bool tryTake() { return drive_.try_lock(); }
  // Takes the token for work at `level` unless a more urgent ask is pending
  // (kLevels: the progress thread, which yields to any ask).
  bool tryTakeAt(int level) { return !wanted(level) && drive_.try_lock(); }
  // The asker took the token: its ask is answered (one more urgent since stays).
  // Also called by a waiter that leaves without it (its operation done).
  void served(int level) {
    int w = level;
    if (want_.load(std::memory_order_relaxed) == level) want_.compare_exchange_strong(w, kLevels);
  }
  void letGo() { drive_.unlock(); }
  // Asks for the token for work at `level`: true when nothing as urgent had
  // asked yet (then the driver should be rung).
  bool ask(int level) {
    askedAt_.store(now(), std::memory_order_relaxed);
    int want = want_.load();
    while (level < want && !want_.compare_exchange_weak(want, level)) {
    }
    return level < want;
  }
  // Whether a waiter wants the token for work more urgent than `op`'s
  // (nullptr: the progress thread, which drives for no level).
  bool wanted(const Operation* op) const { return wanted(op ? op->level : kLevels); }
  bool wanted(int level) const {
    if (want_.load(std::memory_order_relaxed) >= level) return false;
    return now() - askedAt_.load(std::memory_order_relaxed) < kAskLasts;  // (a clock read only while asked)
  }
  bool anyWants() const { return want_.load(std::memory_order_relaxed) < kLevels; }
  // The operation whose blocking caller took the token in submit() and
  // drives it in wait() (Executor::admitForCaller); written by the holder.
  void holdFor(const Operation* op) { heldFor_.store(op, std::memory_order_relaxed); }
  bool heldFor(const Operation* op) const { return heldFor_.load(std::memory_order_relaxed) == op; }

 private:
  static int64_t now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  SpinLock drive_;
  std::atomic<int64_t> askedAt_{0};  // the last ask (ns, steady clock)
  std::atomic<int> want_{kLevels};  // the most urgent level a waiter asked for (kLevels: none)
  std::atomic<const Operation*> heldFor_{nullptr};
};

}  // namespace tern
