// Single-producer / single-consumer byte ring.  The same code runs over a
// shared-memory segment (shm transport: producer and consumer are different
// processes) and over private memory (tcp staging, self loop).
//
// head and tail count bytes ever produced / consumed; they never wrap, so
// "full" and "empty" are unambiguous.  Capacity is a multiple of 4096.
//
// Memory follows use: the data pages are not pre-faulted, and whenever the
// producer finds the ring empty it restarts it near its beginning (`base`,
// the stream position that maps to offset 0, moves up to the head rounded
// down to the granule).  A job of small messages therefore keeps touching the
// same first pages and its resident memory stays a few pages per fifo; the
// first large message faults the span it needs in, and those pages stay
// (never released), so bandwidth after it is what a pre-faulted ring gives.
// The granule is a multiple of every alignment the engine lays records and
// element groups out on (ternaryFifoQuantum) and divides the capacity, so a
// position's alignment on the ring is the same as on the stream.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tern {

struct FifoHeader {
  alignas(64) std::atomic<uint64_t> head;  // written by the producer only
  // The producer's restart point (see above), beside head so that the
  // consumer reads both in one line.  Changed only while the ring is empty,
  // before the head that follows is published (release): a consumer that
  // sees bytes to read sees the base they were written at.
  std::atomic<uint64_t> base;
  alignas(64) std::atomic<uint64_t> tail;  // written by the consumer only
  alignas(64) uint64_t capacity;
  // The producer's window (setWindow; 0 until it sets one): lets the
  // consumer foresee where a restart puts the next bytes.
  std::atomic<uint64_t> window;
};

// Bytes of memory a fifo of `capacity` data bytes occupies (header included).
size_t fifoFootprint(size_t capacity);

class Fifo {
 public:
  Fifo() = default;
  // `mem` holds fifoFootprint(capacity) bytes; `init` zeroes the counters.
  // `granule` divides capacity (both ends of a shared fifo pass the same).
  void attach(void* mem, size_t capacity, size_t granule, bool init);
  // Producer: restart only once `bytes` have gone through since the last
  // restart (rounded up to the granule; default one granule): the span a
  // job of small messages cycles through (TERN_FIFO_WINDOW).
  void setWindow(size_t bytes);

  // Producer: contiguous free bytes at the head (pointer in *p); then publish n.
  size_t writable(char** p);
  // Producer, after writable(): whether n more bytes would go into pages the
  // ring has not used yet while its window is used up and the consumer has
  // more than that much still to read (a writer running ahead; one a
  // message behind, as an exchange's peer is, restarts soon anyway), once
  // the pages in use hold the window and two such writes (room for a writer
  // a message ahead).  A writer that can wait lets the consumer catch up
  // instead, and restarts in resident pages.
  bool outrunsWindow(size_t n) const {
    return head_ - base_ >= window_ && head_ - tailSeen_ > n && offsetOf(head_ - base_) + n > span_ &&
           span_ >= window_ + 2 * n;
  }
  void produce(size_t n);
  // Consumer: contiguous readable bytes at the tail; then release n.
  size_t readable(const char** p);
  void consume(size_t n);
  // Consumer: where the next bytes will lie once produced (contiguous room
  // to the wrap point), without reading the head; found(n): n bytes there
  // were found whole by other means (Conn::recvAhead), as if readable() had
  // shown them.
  size_t ahead(const char** p) const { return readAt(expectedBase(), cap_, p); }
  void found(size_t n);

  // Both ends of a private fifo (one process produces and consumes): n bytes
  // went past it without touching the ring (tcp's unstaged transfers), so the
  // stream positions move on as if they had gone through.  Only while empty.
  void pass(size_t n);

  bool empty() const { return hdr_->head.load(std::memory_order_acquire) ==
                              hdr_->tail.load(std::memory_order_acquire); }
  size_t capacity() const { return cap_; }
  // Stream positions: bytes this side has produced / consumed so far.  Both
  // ends of a stream agree on them, which lets messages be aligned without
  // sending lengths.
  uint64_t produced() const { return head_; }
  uint64_t consumed() const { return tail_; }
  // Bytes from the ring's start to the furthest byte the producer has
  // reached: what of the data area can be resident (tests, statistics).
  size_t span() const { return static_cast<size_t>(span_); }
  uint64_t restarts() const { return restarts_; }  // producer: times it restarted

 private:
  FifoHeader* hdr_ = nullptr;
  char* data_ = nullptr;
  uint64_t cap_ = 0, granule_ = 4096, window_ = 4096;
  // cap_ - 1 when the capacity is a power of two (the default), else 0: a
  // ring offset is then a mask, not a 64-bit division per message.
  uint64_t mask_ = 0;
  uint64_t offsetOf(uint64_t pos) const { return mask_ ? pos & mask_ : pos % cap_; }
  // Each side caches its own counter (only it writes that one); base_ is the
  // producer's.
  uint64_t head_ = 0, tail_ = 0, base_ = 0, span_ = 0, restarts_ = 0;
  uint64_t tailSeen_ = 0;  // producer: the consumer's tail when it last read it (writable)
  // Consumer: the base it last read from the header, the producer's window
  // (none known: no restart foreseen) and the head it last saw.
  uint64_t rbase_ = 0, rwindow_ = UINT64_MAX, seen_ = 0;
  void restart();
  uint64_t expectedBase() const;
  size_t readAt(uint64_t base, uint64_t avail, const char** p) const;
  size_t rebase(uint64_t base, uint64_t avail, const char** p);
};

// The per-message operations, inline: the small path calls them once or
// twice per message, where a call each cost as much as its work.

// The consumer's tail is read again only when the answer may depend on it:
// once the window is used up (a restart needs the ring empty), or when the
// space known from the tail last seen is less than the contiguous run (the
// tail only moves up, so space known is space there).  Between restarts a
// small message then costs the producer no miss on the consumer's line,
// which it read on every message before (Fifo::writable was 5.7% of an
// 8-byte allreduce's samples; perf/RESULTS.md, 2026-12-01: the small path at
// the cache-line floor).
inline size_t Fifo::writable(char** p) {
  uint64_t off = offsetOf(head_ - base_);
  if (head_ - base_ >= window_ || cap_ - (head_ - tailSeen_) < cap_ - off) {
    tailSeen_ = hdr_->tail.load(std::memory_order_acquire);
    if (tailSeen_ == head_ && head_ - base_ >= window_) {
      restart();
      off = offsetOf(head_ - base_);
    }
  }
  uint64_t free = cap_ - (head_ - tailSeen_);
  uint64_t contiguous = cap_ - off;
  *p = data_ + off;
  return static_cast<size_t>(free < contiguous ? free : contiguous);
}

inline void Fifo::produce(size_t n) {
  const uint64_t end = offsetOf(head_ - base_) + n;  // n never crosses the wrap point
  if (end > span_) span_ = end;
  head_ += n;
  hdr_->head.store(head_, std::memory_order_release);
}

// The consumer's view of `avail` bytes at the tail, laid out from `base`.
inline size_t Fifo::readAt(uint64_t base, uint64_t avail, const char** p) const {
  uint64_t off = offsetOf(tail_ - base);
  uint64_t contiguous = cap_ - off;
  *p = data_ + off;
  return static_cast<size_t>(avail < contiguous ? avail : contiguous);
}

// Where the consumer expects the bytes at its tail to start: where the last
// ones did, unless it had read all it had seen (the ring may have been empty)
// and the producer's window is used up, when the producer will have
// restarted at the tail rounded down to the granule (unless it wrote on
// before it saw the ring empty: readable() finds that out).
inline uint64_t Fifo::expectedBase() const {
  if (tail_ == seen_ && tail_ - rbase_ >= rwindow_) return tail_ - tail_ % granule_;
  return rbase_;
}

inline size_t Fifo::readable(const char** p) {
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
  // perf/RESULTS.md, 2026-11-27: shm latency at 4-8 KiB after fifo memory
  // follows use).  `at` is an opaque copy of the expected
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

// As readable() leaves it had the head shown exactly these bytes (a
// consumer that then reads them all expects the producer to restart once
// its window is used, as after an empty ring; readable() corrects a wrong
// guess from the base it publishes).
inline void Fifo::found(size_t n) {
  rbase_ = expectedBase();
  seen_ = std::max(seen_, tail_ + n);
}

inline void Fifo::consume(size_t n) {
  tail_ += n;
  hdr_->tail.store(tail_, std::memory_order_release);
}

}  // namespace tern
