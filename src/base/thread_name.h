// Names the calling thread, so `top -H`, `ps -L`, perf and debuggers tell
// tern's threads from the application's (NCCL names its proxy threads the
// same way).  Linux keeps 15 characters; longer names are cut.
#pragma once
#include <pthread.h>

#include <cstring>

namespace tern {

inline void nameThisThread(const char* name) {
  char cut[16];
  strncpy(cut, name, sizeof cut - 1);
  cut[sizeof cut - 1] = '\0';
  pthread_setname_np(pthread_self(), cut);
}

}  // namespace tern
