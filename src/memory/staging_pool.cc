#include "memory/staging_pool.h"

#include <algorithm>

namespace tern {

StagingPool::~StagingPool() {
  for (Buffer& b : spare_) a_.release(b.p);
}

size_t StagingPool::roundedSize(size_t bytes) {
  size_t n = kMinBytes;
  while (n < bytes) n <<= 1;
  return n;
}

StagingPool::Buffer StagingPool::borrow(size_t bytes) {
  {
    std::lock_guard<std::mutex> lk(m_);
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it)
      if (it->bytes >= bytes && (best == spare_.end() || it->bytes < best->bytes)) best = it;
    if (best != spare_.end()) {
      Buffer b = *best;
      spare_.erase(best);
      return b;
    }
    ++allocs_;
  }
  Buffer b;
  b.bytes = roundedSize(bytes);
  b.p = a_.alloc(b.bytes);  // outside the lock: pinning is slow
  if (!b.p) b.bytes = 0;
  return b;
}

void StagingPool::giveBack(Buffer b) {
  if (!b.p) return;
  std::lock_guard<std::mutex> lk(m_);
  spare_.push_back(b);
  if (spare_.size() <= keep_) return;
  auto smallest = std::min_element(spare_.begin(), spare_.end(),
                                   [](const Buffer& x, const Buffer& y) { return x.bytes < y.bytes; });
  a_.release(smallest->p);
  spare_.erase(smallest);
}

size_t StagingPool::allocations() const {
  std::lock_guard<std::mutex> lk(m_);
  return allocs_;
}

size_t StagingPool::spares() const {
  std::lock_guard<std::mutex> lk(m_);
  return spare_.size();
}

#ifndef TERN_WITH_CUDA
StagingPool* pinnedStagingPool() { return nullptr; }
#endif

}  // namespace tern
