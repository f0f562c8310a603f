// Pinned host buffers for device <-> host staging, kept between calls.
// Pinning (cudaHostAlloc) costs milliseconds and a DMA from pageable memory
// goes through the driver's own bounce buffer, so a staging buffer is made
// once and reused: sizes are rounded up to a power of two (at least 1 MiB)
// so the next training step's same-sized request finds it again, and up to
// `keep` returned buffers stay allocated.  The pool only does bookkeeping;
// the allocator is given (cudaHostAlloc in cuda_staging.cu, malloc in the
// CPU unit test).
#pragma once
#include <cstddef>
#include <mutex>
#include <vector>

namespace tern {

struct StagingAllocator {
  void* (*alloc)(size_t bytes);  // nullptr when out of (pinned) memory
  void (*release)(void* p);
};

class StagingPool {
 public:
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
  };
  static constexpr size_t kMinBytes = size_t(1) << 20;

  explicit StagingPool(StagingAllocator a, size_t keep = 8) : a_(a), keep_(keep) {}
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer of at least `bytes` (contents undefined); p == nullptr when the
  // allocator failed.  The smallest spare that fits, else a new one.
  Buffer borrow(size_t bytes);
  // Back to the pool (freed when `keep` spares are already held: the
  // smallest goes, as a large buffer serves every request it fits).
  void giveBack(Buffer b);

  // Bookkeeping, for tests and logs.
  size_t allocations() const;  // allocator calls so far
  size_t spares() const;       // buffers held, not lent
  static size_t roundedSize(size_t bytes);

 private:
  StagingAllocator a_;
  size_t keep_;
  mutable std::mutex m_;
  std::vector<Buffer> spare_;
  size_t allocs_ = 0;
};

// The process's pool of pinned buffers; nullptr in a build without CUDA.
StagingPool* pinnedStagingPool();

}  // namespace tern
