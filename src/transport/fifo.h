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

}  // namespace tern
