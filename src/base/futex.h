// A thread sleeps on one 32-bit word until another changes it and wakes it
// (Linux futex): a waiter per word, so a wake reaches only the threads that
// wait on that word, where a shared condition variable wakes them all.
#pragma once
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace tern {

// Sleeps while *word == expected, for at most `ns` (a spurious or early
// return is possible: callers test their condition again).
inline void futexWait(std::atomic<uint32_t>* word, uint32_t expected, long ns) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex is a plain 32-bit word");
  timespec t{ns / 1000000000L, ns % 1000000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &t, nullptr, 0);
}

inline void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace tern
