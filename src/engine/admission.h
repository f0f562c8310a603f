// What is submitted and not yet complete: the pending list any thread fills
// (under the lock it shares with the sleepers, Waits::lock), the counts the
// progress thread and drain() wait on, and the issue stamps.  The driver
// moves pending operations into its level lists (Levels) every round.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "engine/operation.h"

namespace tern {

class Admission {
 public:
  explicit Admission(std::mutex& lock) : lock_(lock) {}

  // The next issue stamp: operations get one when submitted; an unordered
  // one's task takes one when the caller posts its message (Phase::postedAt).
  uint64_t stamp() { return stamps_.fetch_add(1) + 1; }
  // Stamps and queues `ops` (any thread); returns how many of them stand.
  int queue(const std::vector<OpPtr>& ops);
  // Hands the pending operations to `enlist` (the driver, every round: the
  // lock is taken only when something was queued).
  template <class Enlist>
  void take(Enlist enlist) {
    if (!anyPending_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lk(lock_);
    for (OpPtr& op : pending_) enlist(op);
    pending_.clear();
    anyPending_.store(false, std::memory_order_relaxed);
  }
  bool anyPending() const { return anyPending_.load(); }
  bool anyPendingNow() const { return anyPending_.load(std::memory_order_relaxed); }  // a glance

  // Submitted and not completed (standing ones aside), and standing ones.
  int outstanding() const { return outstanding_.load(); }
  int standing() const { return standing_.load(); }
  void count(int n) { outstanding_.fetch_add(n); }
  void countOff(const Operation& op) { (op.standing ? standing_ : outstanding_).fetch_sub(1); }
  // Operations completed without failure, standing ones aside (statistics:
  // ternCommGetStats).  Only the drive token's holder completes operations:
  // a load and a store, not a locked add (2% of an 8-byte allreduce's
  // samples; perf/RESULTS.md, 2026-12-01: the small path at the cache-line floor).
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  void countCompleted() { completed_.store(completed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

 private:
  std::mutex& lock_;
  std::vector<OpPtr> pending_;
  std::atomic<bool> anyPending_{false};  // pending_ non-empty: take() skips the lock otherwise
  std::atomic<int> outstanding_{0};
  std::atomic<int> standing_{0};         // standing operations admitted (Operation::standing)
  std::atomic<uint64_t> stamps_{0};
  std::atomic<uint64_t> completed_{0};
};

}  // namespace tern
