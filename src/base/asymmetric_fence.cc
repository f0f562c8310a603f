#include "base/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tern {

namespace {

#if defined(__SANITIZE_THREAD__)
#define TERN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TERN_TSAN 1
#endif
#endif

long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

bool registerAsymmetric() {
#ifdef TERN_TSAN
  return false;
#else
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
#endif
}

}  // namespace

const bool kAsymmetricFence = registerAsymmetric();

void fenceHeavy() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!kAsymmetricFence) return;
  // Registered, the private command does not fail; the global one (every
  // thread of every process, slower) is the fallback that still holds.
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) membarrier(MEMBARRIER_CMD_GLOBAL);
}

}  // namespace tern
