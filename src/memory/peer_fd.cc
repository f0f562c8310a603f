#include "memory/peer_fd.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

namespace tern {

int peerFd(int64_t pid, int fd) {
  int pfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pfd >= 0) {
    int got = static_cast<int>(syscall(SYS_pidfd_getfd, pfd, fd, 0));
    close(pfd);
    if (got >= 0) return got;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%lld/fd/%d", static_cast<long long>(pid), fd);
  return open(path, O_RDWR | O_CLOEXEC);
}

}  // namespace tern
