// A store-then-load ordering (Dekker's pattern) whose two sides run at very
// different rates: the frequent side pays a compiler barrier, the rare side
// a membarrier(2) that makes every running thread of the process execute a
// full barrier (folly's asymmetric_thread_fence_light / _heavy, liburcu's
// membarrier flavour).  The frequent side, for each of its threads:
//   store A; fenceLight(); load B
// and the rare side:
//   store B; fenceHeavy(); load A
// then either the frequent side's load sees B or the rare side's load sees
// A, as with two seq_cst fences.  Where membarrier is missing (an old
// kernel, a seccomp filter) or under TSAN (which does not model it), both
// sides take a full fence; fenceLight then costs what a seq_cst store did.
#pragma once
#include <atomic>

namespace tern {

// Whether the light side may be a compiler barrier (decided once, when the
// library loads: the process registers for membarrier's private expedited
// command then).
extern const bool kAsymmetricFence;

inline void fenceLight() {
  if (kAsymmetricFence) std::atomic_signal_fence(std::memory_order_seq_cst);
  else std::atomic_thread_fence(std::memory_order_seq_cst);
}

// A syscall: microseconds, for the rare side only.
void fenceHeavy();

}  // namespace tern
