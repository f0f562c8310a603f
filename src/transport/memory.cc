// Pre-faulted private memory for transport buffers.
#include <sys/mman.h>

#include "transport/transport.h"

namespace tern {

void* allocPrefaulted(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return p;
}

void freePrefaulted(void* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

}  // namespace tern
