#include "memory/peer_fd.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tern {

int peerFd(int64_t pid, int fd) {
  int pfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pfd >= 0) {
    int got = static_cast<int>(syscall(SYS_pidfd_getfd, pfd, fd, 0));
    close(pfd);
    if (got >= 0) return got;
  }
  return open(peerFdPath(pid, fd).c_str(), O_RDWR | O_CLOEXEC);
}

std::string peerFdPath(int64_t pid, int fd) {
  return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
}

}  // namespace tern
