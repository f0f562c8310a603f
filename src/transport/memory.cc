// Private memory for transport buffers, faulted in on use.
#include <sys/mman.h>

#include "transport/transport.h"

#include <string>

#include "base/error.h"

namespace tern {

void* allocPages(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return p;
}

void freePages(void* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

}  // namespace tern

namespace tern {

size_t Staging::footprint() const { return fifoFootprint(cap_); }

ternResult_t Staging::allocate() {
  if (ready()) return ternSuccess;
  void* s = allocPages(footprint());
  void* r = allocPages(footprint());
  if (!s || !r) {
    freePages(s, footprint());
    freePages(r, footprint());
    // The executor reports the thread's last error: it must be this one.
    return setError(ternSystemError, "cannot allocate " + std::to_string(2 * footprint()) +
                                         " bytes of staging buffers for a connection");
  }
  send_ = s;
  recv_ = r;
  sendFifo_.attach(send_, cap_, granule_, true);
  recvFifo_.attach(recv_, cap_, granule_, true);
  sendFifo_.setWindow(window_);
  recvFifo_.setWindow(window_);
  return ternSuccess;
}

Staging::~Staging() {
  freePages(send_, footprint());
  freePages(recv_, footprint());
}

}  // namespace tern
