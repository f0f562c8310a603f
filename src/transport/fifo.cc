#include "transport/fifo.h"

#include <algorithm>
#include <new>

namespace tern {

static constexpr size_t kHeaderBytes = 4096;  // keeps the data page-aligned
static_assert(sizeof(FifoHeader) <= kHeaderBytes, "fifo header too large");

size_t fifoFootprint(size_t capacity) { return kHeaderBytes + capacity; }

void Fifo::attach(void* mem, size_t capacity, size_t granule, bool init) {
  hdr_ = static_cast<FifoHeader*>(mem);
  if (init) {
    new (hdr_) FifoHeader();
    hdr_->head.store(0);
    hdr_->base.store(0);
    hdr_->tail.store(0);
    hdr_->capacity = capacity;
    hdr_->window.store(0);
  }
  data_ = static_cast<char*>(mem) + kHeaderBytes;
  cap_ = capacity;
  granule_ = granule && capacity % granule == 0 ? granule : capacity;
  window_ = granule_;
  head_ = hdr_->head.load();
  tail_ = seen_ = tailSeen_ = hdr_->tail.load();
  base_ = rbase_ = hdr_->base.load();
}

// Published before any byte (the first head's release orders it).
void Fifo::setWindow(size_t bytes) {
  window_ = std::min<uint64_t>(std::max<uint64_t>((bytes + granule_ - 1) / granule_ * granule_, granule_), cap_);
  hdr_->window.store(window_, std::memory_order_relaxed);
}

// Only while empty (tail == head): nothing the consumer may still read lies
// on the ring, and no posted receive (ucx) or send is outstanding on it.
void Fifo::restart() {
  base_ = head_ - head_ % granule_;
  ++restarts_;
  hdr_->base.store(base_, std::memory_order_relaxed);  // published by the next produce
}

// The consumer's tail is read again only when the answer may depend on it:
// once the window is used up (a restart needs the ring empty), or when the
// space known from the tail last seen is less than the contiguous run (the
// tail only moves up, so space known is space there).  Between restarts a
// small message then costs the producer no miss on the consumer's line,
// which it read on every message before (Fifo::writable was 5.7% of an
// 8-byte allreduce's samples, session 41).
size_t Fifo::writable(char** p) {
  uint64_t off = (head_ - base_) % cap_;
  if (head_ - base_ >= window_ || cap_ - (head_ - tailSeen_) < cap_ - off) {
    tailSeen_ = hdr_->tail.load(std::memory_order_acquire);
    if (tailSeen_ == head_ && head_ - base_ >= window_) {
      restart();
      off = (head_ - base_) % cap_;
    }
  }
  uint64_t free = cap_ - (head_ - tailSeen_);
  uint64_t contiguous = cap_ - off;
  *p = data_ + off;
  return static_cast<size_t>(free < contiguous ? free : contiguous);
}

void Fifo::produce(size_t n) {
  const uint64_t end = (head_ - base_) % cap_ + n;  // n never crosses the wrap point
  if (end > span_) span_ = end;
  head_ += n;
  hdr_->head.store(head_, std::memory_order_release);
}

// The consumer's view of `avail` bytes at the tail, laid out from `base`.
size_t Fifo::readAt(uint64_t base, uint64_t avail, const char** p) const {
  uint64_t off = (tail_ - base) % cap_;
  uint64_t contiguous = cap_ - off;
  *p = data_ + off;
  return static_cast<size_t>(avail < contiguous ? avail : contiguous);
}

// Where the consumer expects the bytes at its tail to start: where the last
// ones did, unless it had read all it had seen (the ring may have been empty)
// and the producer's window is used up, when the producer will have
// restarted at the tail rounded down to the granule (unless it wrote on
// before it saw the ring empty: readable() finds that out).
uint64_t Fifo::expectedBase() const {
  if (tail_ == seen_ && tail_ - rbase_ >= rwindow_) return tail_ - tail_ % granule_;
  return rbase_;
}

// The base is not the one expected: kept off the inlined path, where the
// compiler could otherwise make the offset wait on the load.
[[gnu::noinline, gnu::cold]] size_t Fifo::rebase(uint64_t base, uint64_t avail, const char** p) {
  rbase_ = base;
  const uint64_t w = hdr_->window.load(std::memory_order_relaxed);
  rwindow_ = w ? w : UINT64_MAX;
  return readAt(base, avail, p);
}

size_t Fifo::readable(const char** p) {
  uint64_t head = hdr_->head.load(std::memory_order_acquire);
  // A consumer that found bytes whole before they were announced (found())
  // may be past the head until the producer publishes them.
  uint64_t avail = head > tail_ ? head - tail_ : 0;
  if (avail == 0) {
    *p = data_;
    return 0;
  }
  // After the acquire: the base the bytes up to `head` were written at (it
  // cannot move again until we have consumed them).  The offset is computed
  // from the base we expect, and the load only decides a branch that is
  // almost never taken, so the bytes' address does not wait on it (the line
  // head and base share is also the one the producer keeps storing its head
  // into: a dependent load there cost 0.2-0.3 us per 4 KiB allreduce,
  // perf/RESULTS.md session 28).  `at` is an opaque copy of the expected
  // base: after the test the compiler would otherwise use the loaded
  // register, equal to it by then.
  uint64_t expect = expectedBase(), at = expect;
  asm("" : "+r"(at));
  seen_ = head;
  uint64_t base = hdr_->base.load(std::memory_order_relaxed);
  if (__builtin_expect(base != expect, 0)) return rebase(base, avail, p);
  rbase_ = expect;
  return readAt(at, avail, p);
}

void Fifo::pass(size_t n) {
  head_ += n;
  tail_ = seen_ = tailSeen_ = head_;
  hdr_->head.store(head_, std::memory_order_release);
  hdr_->tail.store(tail_, std::memory_order_release);
}

// As readable() leaves it had the head shown exactly these bytes (a
// consumer that then reads them all expects the producer to restart once
// its window is used, as after an empty ring; readable() corrects a wrong
// guess from the base it publishes).
void Fifo::found(size_t n) {
  rbase_ = expectedBase();
  seen_ = std::max(seen_, tail_ + n);
}

void Fifo::consume(size_t n) {
  tail_ += n;
  hdr_->tail.store(tail_, std::memory_order_release);
}

}  // namespace tern
