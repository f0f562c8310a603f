// Pieces of one pinned buffer for an asynchronous memory type's staging
// (cuda_ops.cu): bytes between host memory (a fifo slot, a task's vector)
// and the device go through a piece, and a piece is taken for work that the
// operation's next fence covers and given back once that fence is done.
// Fences complete in order, so pieces are given back in the order they were
// taken: a ring.  Bookkeeping only (tested on CPU in tests/test_memory.cc);
// the buffer is lent by pinnedStagingPool, never allocated per call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>

namespace tern {

class StagingRing {
 public:
  static constexpr size_t kNone = SIZE_MAX;
  static constexpr size_t kAlign = 64;

  explicit StagingRing(size_t capacity) : cap_(capacity / kAlign * kAlign) {}

  // The offset of `bytes` contiguous bytes (aligned to kAlign) that stay
  // taken until release(f) with f >= fence; kNone when there is no room.
  size_t take(size_t bytes, uint64_t fence) {
    const size_t n = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
    if (used_ == 0) head_ = tail_ = 0;
    if (used_ == cap_ || n > cap_) return kNone;
    size_t off, pad = 0;
    if (head_ >= tail_) {  // free: [head_, cap_) and [0, tail_)
      if (cap_ - head_ >= n) off = head_;
      else if (tail_ >= n) pad = cap_ - head_, off = 0;
      else return kNone;
    } else {  // free: [head_, tail_)
      if (tail_ - head_ < n) return kNone;
      off = head_;
    }
    head_ = off + n;
    pieces_.push_back({pad + n, fence});
    used_ += pad + n;
    return off;
  }

  // Every piece taken for a fence <= done is free again.
  void release(uint64_t done) {
    while (!pieces_.empty() && pieces_.front().fence <= done) {
      tail_ = (tail_ + pieces_.front().bytes) % cap_;
      used_ -= pieces_.front().bytes;
      pieces_.pop_front();
    }
  }

  size_t used() const { return used_; }
  size_t capacity() const { return cap_; }

 private:
  struct Piece {
    size_t bytes;  // with the padding skipped at the end before it
    uint64_t fence;
  };
  size_t cap_, head_ = 0, tail_ = 0, used_ = 0;
  std::deque<Piece> pieces_;
};

}  // namespace tern
