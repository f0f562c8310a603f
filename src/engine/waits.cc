// Waits (waits.h): who sleeps and who wakes them.
#include "engine/waits.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "base/futex.h"

namespace tern {

Waits::Waits() { bell_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

Waits::~Waits() {
  if (bell_ >= 0) close(bell_);
}

// Completions are frequent and usually nobody sleeps on them (the caller
// drives its own operation): notify only when someone does.  A sleeper
// increments doneWaiters_ and then tests its predicate, both while it holds
// m_, and callers change what it tests before they read doneWaiters_, all
// sequentially consistent: either it sees the change, or we see it, and then
// taking m_ waits until it is asleep on doneCv_, so the notification cannot
// slip in between.
void Waits::wakeWaiters() {
  if (doneWaiters_.load() > 0) {
    { std::lock_guard<std::mutex> lk(m_); }
    doneCv_.notify_all();
  }
}

// Sequentially consistent with Rounds::idleWait(): the ringer publishes its
// work (the pending list, the token's want) before it reads polling_, the
// driver sets polling_ before it looks for that work, so one of the two
// always sees the other.
void Waits::ring() {
  if (bell_ < 0 || !polling_.load()) return;
  uint64_t one = 1;
  ssize_t r = write(bell_, &one, sizeof one);
  (void)r;  // a full counter is still a ring
}

void Waits::answerBell() {
  uint64_t rung;
  if (bell_ >= 0) (void)!read(bell_, &rung, sizeof rung);
}

// Sleeps on the operation's own word until complete() sets it: other
// completions do not wake this thread (a shared condition variable woke
// every waiting thread at each one; ~150 switches a second per waiter in a
// PriorityScheduler step; perf/RESULTS.md, 2026-11-29: priorities at 4 hosts,
// which variant is CPU-bound).  The nap bounds a missed wake-up.
void Waits::sleepOnDone(Operation& op) {
  op.sleepers.fetch_add(1);
  while (op.doneWord.load() == 0) futexWait(&op.doneWord, 0, 20 * 1000 * 1000);
  op.sleepers.fetch_sub(1);
}

ternResult_t Waits::finishWait(const Operation& op, std::string* error) {
  if (error) {  // (usually empty: no string copy then)
    if (op.error.empty()) error->clear();
    else *error = op.error;
  }
  return op.result;
}

}  // namespace tern
