// Who sleeps and who wakes them: callers waiting for their operations (on
// the shared done condition, or on an operation's own word), the progress
// thread waiting for work, and the doorbell that ends the driver's poll()
// early.  One lock guards the sleepers and the pending list (Admission), so
// work queued under it cannot slip past a sleeper that just tested for it.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "engine/operation.h"

namespace tern {

// Pauses a waiting thread spins before it starts yielding (Rounds::idleWait,
// the inline runner's wait): a peer on another core answers within them; one
// that shares our core runs once we yield.
constexpr unsigned kSpinPauses = 64;

class Waits {
 public:
  Waits();
  ~Waits();
  Waits(const Waits&) = delete;
  Waits& operator=(const Waits&) = delete;

  std::mutex& lock() { return m_; }
  // Wakes the threads asleep on the done condition (only when there are any).
  void wakeWaiters();
  // Sleeps on the done condition until `ready` (or `nap`: the token may have come free).
  template <class Pred>
  void sleepUntil(Pred ready, std::chrono::milliseconds nap = std::chrono::milliseconds(1)) {
    std::unique_lock<std::mutex> lk(m_);
    ++doneWaiters_;
    doneCv_.wait_for(lk, nap, ready);
    --doneWaiters_;
  }
  // The progress thread: work for it, or the token let go.
  void notifyWork() { workCv_.notify_all(); }
  template <class Pred>
  void awaitWork(Pred ready) {
    std::unique_lock<std::mutex> lk(m_);
    workCv_.wait(lk, ready);
  }
  // The progress thread's timed nap while another thread drives: it looks
  // for the token again at its end even if nobody notifies it.
  void napForWork(std::chrono::milliseconds nap) {
    std::unique_lock<std::mutex> lk(m_);
    progressNaps_.store(true, std::memory_order_relaxed);
    workCv_.wait_for(lk, nap);
    progressNaps_.store(false, std::memory_order_relaxed);
  }
  // Whether the progress thread is in that nap (a hint: a caller that reads
  // false notifies it; one that reads true may leave it to the nap's end).
  bool progressNaps() const { return progressNaps_.load(std::memory_order_relaxed); }
  // The doorbell: rung when work arrives or a caller asks for the token
  // while the driver sleeps in poll() (polling()), read back after it.
  void ring();
  int bell() const { return bell_; }
  void polling(bool on) { polling_.store(on); }
  void answerBell();
  // Sleeps on the operation's own word until Executor::complete sets it.
  static void sleepOnDone(Operation& op);
  // The operation's result, and its sentence into *error.
  static ternResult_t finishWait(const Operation& op, std::string* error);

 private:
  std::mutex m_;
  std::condition_variable workCv_;    // the progress thread: work for it, token released
  std::condition_variable doneCv_;    // waiters: an operation completed, token released
  std::atomic<int> doneWaiters_{0};   // threads asleep on doneCv_ (spares futile wake-ups)
  int bell_ = -1;                     // eventfd; -1: the driver's poll just times out
  std::atomic<bool> polling_{false};
  std::atomic<bool> progressNaps_{false};  // napForWork(): the progress thread wakes on its own
};

}  // namespace tern
