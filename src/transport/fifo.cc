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
  mask_ = (capacity & (capacity - 1)) == 0 ? capacity - 1 : 0;
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
[[gnu::noinline]] void Fifo::restart() {
  base_ = head_ - head_ % granule_;
  ++restarts_;
  hdr_->base.store(base_, std::memory_order_relaxed);  // published by the next produce
}

// The base is not the one expected: kept off the inlined path, where the
// compiler could otherwise make the offset wait on the load.
[[gnu::noinline, gnu::cold]] size_t Fifo::rebase(uint64_t base, uint64_t avail, const char** p) {
  rbase_ = base;
  const uint64_t w = hdr_->window.load(std::memory_order_relaxed);
  rwindow_ = w ? w : UINT64_MAX;
  return readAt(base, avail, p);
}

void Fifo::pass(size_t n) {
  head_ += n;
  tail_ = seen_ = tailSeen_ = head_;
  hdr_->head.store(head_, std::memory_order_release);
  hdr_->tail.store(tail_, std::memory_order_release);
}

}  // namespace tern
