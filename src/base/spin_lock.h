// A lock for short critical sections on the small-call path: taking it is
// one atomic exchange and letting go one plain store.  std::mutex costs an
// atomic read-modify-write both ways plus a call into libpthread (~60
// instructions a pair, glibc's unlock must look for sleepers); the small
// path takes two locks per call (issue order, the drive token), so those
// were ~250 of an 8-byte allreduce's ~1,800 instructions (callgrind;
// perf/RESULTS.md, 2026-12-01: the small path at the cache-line floor).
// A waiter spins briefly, then yields, then naps: the holders keep it
// for a few hundred instructions (numbering an operation; a blocking small
// call's own steps), and a nap, unlike sched_yield, also lets a holder of
// lower scheduling class run when the waiter is SCHED_FIFO.
#pragma once
#include <immintrin.h>
#include <sched.h>
#include <time.h>

#include <atomic>

namespace tern {

class SpinLock {
 public:
  bool try_lock() {
    return !held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire);
  }
  void lock() {
    for (unsigned n = 0; !try_lock(); ++n) {
      if (n < 64) {
        _mm_pause();
      } else if (n < 128) {
        sched_yield();
      } else {
        timespec nap{0, 20000};
        nanosleep(&nap, nullptr);
      }
    }
  }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

}  // namespace tern
