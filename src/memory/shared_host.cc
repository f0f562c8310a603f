// ternMemAlloc's allocations and their handles (shared_host.h).
#include "memory/shared_host.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "base/error.h"
#include "memory/memory.h"
#include "memory/peer_fd.h"

namespace tern::shared_host {

namespace {

constexpr size_t kPage = 4096;
size_t pages(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// What a peer needs to map an allocation: the exporter's memfd, and its
// inode, so a descriptor number reused after a free is not taken for it.
struct HostHandle {
  int64_t pid;
  int32_t fd, pad;
  uint64_t ino;
};
static_assert(sizeof(HostHandle) <= sizeof(IpcHandle::data), "fits the handle");

struct Allocation {
  size_t bytes;
  int fd;
  uint64_t ino;
};

std::mutex gMu;
std::map<uintptr_t, Allocation> gAllocs;  // by base address
std::atomic<size_t> gLive{0};

HostHandle handleOf(const IpcHandle& h) {
  HostHandle hh;
  memcpy(&hh, h.data, sizeof hh);
  return hh;
}

// The memfd behind an allocation: sized, then sealed, so no process that
// maps it can shrink it under a peer's reads.
ternResult_t makeFile(size_t bytes, int* fd, uint64_t* ino) {
  *fd = static_cast<int>(syscall(SYS_memfd_create, "tern-host", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (*fd < 0) return setSysError("ternMemAlloc: memfd_create failed");
  struct stat st;
  if (ftruncate(*fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 || fstat(*fd, &st) != 0) {
    ternResult_t r = setSysError("ternMemAlloc: cannot size " + std::to_string(bytes) +
                                 " bytes of shared memory (is /dev/shm limited?)");
    ::close(*fd);
    return r;
  }
  *ino = static_cast<uint64_t>(st.st_ino);
  return ternSuccess;
}

}  // namespace

ternResult_t allocate(void** ptr, size_t size) {
  if (!ptr) return setError(ternInvalidArgument, "ternMemAlloc: ptr is NULL");
  if (size == 0) return setError(ternInvalidArgument, "ternMemAlloc: size is 0");
  const size_t bytes = pages(size);
  int fd = -1;
  uint64_t ino = 0;
  TERN_CHECK(makeFile(bytes, &fd, &ino));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ternResult_t r = setSysError("ternMemAlloc: cannot map " + std::to_string(bytes) + " bytes");
    ::close(fd);
    return r;
  }
  std::lock_guard<std::mutex> lk(gMu);
  gAllocs[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, fd, ino};
  gLive.fetch_add(1, std::memory_order_release);
  *ptr = p;
  return ternSuccess;
}

ternResult_t release(void* ptr) {
  if (!ptr) return ternSuccess;  // as free(NULL)
  Allocation a;
  {
    std::lock_guard<std::mutex> lk(gMu);
    auto it = gAllocs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == gAllocs.end()) {
      char where[32];
      snprintf(where, sizeof where, "%p", ptr);
      return setError(ternInvalidArgument, std::string("ternMemFree: ") + where +
                                               " was not returned by ternMemAlloc (or was freed already)");
    }
    a = it->second;
    gAllocs.erase(it);
    gLive.fetch_sub(1, std::memory_order_relaxed);
  }
  munmap(ptr, a.bytes);
  ::close(a.fd);
  return ternSuccess;
}

bool exportOf(const void* p, IpcHandle* h, uint64_t* offset) {
  if (gLive.load(std::memory_order_acquire) == 0) return false;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lk(gMu);
  auto it = gAllocs.upper_bound(at);
  if (it == gAllocs.begin()) return false;
  --it;
  if (at >= it->first + it->second.bytes) return false;
  *h = IpcHandle{};
  h->type = static_cast<uint32_t>(MemType::Host);
  h->size = it->second.bytes;
  const HostHandle hh{static_cast<int64_t>(getpid()), it->second.fd, 0, it->second.ino};
  memcpy(h->data, &hh, sizeof hh);
  *offset = at - it->first;
  return true;
}

void* open(const IpcHandle& h, std::string* why) {
  const HostHandle hh = handleOf(h);
  if (h.type != static_cast<uint32_t>(MemType::Host) || hh.pid == getpid()) {
    *why = "the peer's buffer is not another process's ternMemAlloc memory";
    return nullptr;
  }
  const int fd = peerFd(hh.pid, hh.fd);
  if (fd < 0) {
    *why = "cannot open the peer's shared host memory (process " + std::to_string(hh.pid) + ": " +
           strerror(errno) + ")";
    return nullptr;
  }
  struct stat st;
  void* m = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_ino) == hh.ino &&
      static_cast<uint64_t>(st.st_size) >= h.size)
    m = mmap(nullptr, pages(h.size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    *why = "the peer's shared host memory is gone (freed) or cannot be mapped";
    return nullptr;
  }
  return m;
}

void close(const IpcHandle& h, void* base) { munmap(base, pages(h.size)); }

bool stale(const IpcHandle& h) {
  if (h.type != static_cast<uint32_t>(MemType::Host)) return false;
  const HostHandle hh = handleOf(h);
  struct stat st;
  return stat(peerFdPath(hh.pid, hh.fd).c_str(), &st) != 0 || static_cast<uint64_t>(st.st_ino) != hh.ino;
}

}  // namespace tern::shared_host
