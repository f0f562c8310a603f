// Single-producer / single-consumer byte ring.  The same code runs over a
// shared-memory segment (shm transport: producer and consumer are different
// processes) and over private memory (tcp staging, self loop).
//
// head and tail count bytes ever produced / consumed; they never wrap, so
// "full" and "empty" are unambiguous.  Capacity is a multiple of 4096.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tern {

struct FifoHeader {
  alignas(64) std::atomic<uint64_t> head;  // written by the producer only
  alignas(64) std::atomic<uint64_t> tail;  // written by the consumer only
  alignas(64) uint64_t capacity;
};

// Bytes of memory a fifo of `capacity` data bytes occupies (header included).
size_t fifoFootprint(size_t capacity);

class Fifo {
 public:
  Fifo() = default;
  // `mem` holds fifoFootprint(capacity) bytes; `init` zeroes the counters.
  void attach(void* mem, size_t capacity, bool init);

  // Producer: contiguous free bytes at the head (pointer in *p); then publish n.
  size_t writable(char** p);
  void produce(size_t n);
  // Consumer: contiguous readable bytes at the tail; then release n.
  size_t readable(const char** p);
  void consume(size_t n);

  bool empty() const { return hdr_->head.load(std::memory_order_acquire) ==
                              hdr_->tail.load(std::memory_order_acquire); }
  size_t capacity() const { return cap_; }
  // Stream positions: bytes this side has produced / consumed so far.  Both
  // ends of a stream agree on them, which lets messages be aligned without
  // sending lengths.
  uint64_t produced() const { return head_; }
  uint64_t consumed() const { return tail_; }

 private:
  FifoHeader* hdr_ = nullptr;
  char* data_ = nullptr;
  uint64_t cap_ = 0;
  // Each side caches its own counter (only it writes that one).
  uint64_t head_ = 0, tail_ = 0;
};

}  // namespace tern
