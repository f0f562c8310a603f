#include "transport/fifo.h"

#include <new>

namespace tern {

static constexpr size_t kHeaderBytes = 4096;  // keeps the data page-aligned
static_assert(sizeof(FifoHeader) <= kHeaderBytes, "fifo header too large");

size_t fifoFootprint(size_t capacity) { return kHeaderBytes + capacity; }

void Fifo::attach(void* mem, size_t capacity, bool init) {
  hdr_ = static_cast<FifoHeader*>(mem);
  if (init) {
    new (hdr_) FifoHeader();
    hdr_->head.store(0);
    hdr_->tail.store(0);
    hdr_->capacity = capacity;
  }
  data_ = static_cast<char*>(mem) + kHeaderBytes;
  cap_ = capacity;
  head_ = hdr_->head.load();
  tail_ = hdr_->tail.load();
}

size_t Fifo::writable(char** p) {
  uint64_t tail = hdr_->tail.load(std::memory_order_acquire);
  uint64_t free = cap_ - (head_ - tail);
  uint64_t off = head_ % cap_;
  uint64_t contiguous = cap_ - off;
  *p = data_ + off;
  return static_cast<size_t>(free < contiguous ? free : contiguous);
}

void Fifo::produce(size_t n) {
  head_ += n;
  hdr_->head.store(head_, std::memory_order_release);
}

size_t Fifo::readable(const char** p) {
  uint64_t head = hdr_->head.load(std::memory_order_acquire);
  uint64_t avail = head - tail_;
  uint64_t off = tail_ % cap_;
  uint64_t contiguous = cap_ - off;
  *p = data_ + off;
  return static_cast<size_t>(avail < contiguous ? avail : contiguous);
}

void Fifo::consume(size_t n) {
  tail_ += n;
  hdr_->tail.store(tail_, std::memory_order_release);
}

}  // namespace tern
