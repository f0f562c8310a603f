// The fences of an asynchronous memory type (memory.h, "Async contract"):
// numbered 1, 2, ... and recorded in a ring of kSlots reusable events, so an
// operation creates at most kSlots events however many bursts it has.  A
// slot is recorded again only once the fence it held is known done (when
// the ring is full, fence() waits for the oldest).  Fences complete in
// order, so done(f) walks the ring from the oldest pending one.  The events
// are a parameter: CUDA events in cuda_ops.cu, a simulated device clock in
// tests/test_memory.cc (the ring's bookkeeping needs no GPU).
//   Ev::record(slot) -> 0 or an error; Ev::query(slot) -> 0 (reached),
//   kNotReady, or an error; Ev::wait(slot) -> 0 or an error (blocks).
#pragma once
#include <cstdint>

namespace tern {

template <class Ev>
class FenceRing {
 public:
  static constexpr uint64_t kSlots = 16;
  static constexpr int kNotReady = -1;

  explicit FenceRing(Ev& ev) : ev_(ev) {}

  // A fence after everything enqueued so far; *err: the first failure.
  uint64_t fence(int* err) {
    *err = 0;
    if (issued_ - completed_ == kSlots) {  // full: the oldest must end first
      *err = ev_.wait(slot(completed_ + 1));
      ++completed_;
    }
    const uint64_t f = ++issued_;
    const int e = ev_.record(slot(f));
    if (*err == 0) *err = e;
    return f;
  }

  // Whether fence f (and so every earlier one) is reached.  A failed query
  // counts as reached, with *err set: nobody waits on failed work.
  bool done(uint64_t f, int* err) {
    *err = 0;
    while (completed_ < f && completed_ < issued_) {
      const int q = ev_.query(slot(completed_ + 1));
      if (q == kNotReady) return false;
      ++completed_;
      if (q != 0) {
        *err = q;
        return true;
      }
    }
    return true;
  }

  // Returns once fence f (so every earlier one) is reached: the thread
  // blocks on f's event alone.  0 or the first failure.
  int wait(uint64_t f) {
    if (f <= completed_ || f > issued_) return 0;
    const int e = ev_.wait(slot(f));
    completed_ = f;
    return e;
  }

  static unsigned slot(uint64_t f) { return static_cast<unsigned>(f % kSlots); }

 private:
  Ev& ev_;
  uint64_t issued_ = 0, completed_ = 0;
};

}  // namespace tern
