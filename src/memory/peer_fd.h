// Another process's file descriptor, opened here: how a rank maps memory a
// peer on its host allocated as a memfd (the simulated device's IPC, and
// host memory from ternMemAlloc).
#pragma once
#include <cstdint>
#include <string>

namespace tern {

// pidfd_getfd (kernel 5.6; ptrace permission, as process_vm_readv), else
// the peer's /proc entry.  -1 with errno set when neither works (the
// process is gone, or this one may not look at it).
int peerFd(int64_t pid, int fd);
// That descriptor's /proc entry ("/proc/<pid>/fd/<fd>").
std::string peerFdPath(int64_t pid, int fd);

}  // namespace tern
