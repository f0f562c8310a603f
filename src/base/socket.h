// Blocking-with-deadline socket helpers shared by the bootstrap and the tcp
// transport.  Every wait is bounded: a stalled peer becomes ternTimeout.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "tern/tern.h"

namespace tern {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
Deadline deadlineAfter(double seconds);
// Milliseconds left before `d`, rounded up (0 when past), capped at `cap`.
int msLeft(Deadline d, int cap = 1000);

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string str() const;                 // "1.2.3.4:5678" / "[::1]:5678"
  std::string host() const;                // "1.2.3.4" / "::1"
  int port() const;
  void setPort(int port);
};

// Parses "host:port" / "[v6]:port" (host may be a name).
ternResult_t parseHostPort(const std::string& s, SockAddr* out);
// Address of the interface chosen by TERN_SOCKET_IFNAME (NCCL syntax: "eth",
// "^docker", "=eth0"), else the first up non-loopback interface, else loopback.
ternResult_t pickInterface(const std::string& ifspec, SockAddr* out, std::string* ifname);

ternResult_t listenOn(const SockAddr& bindAddr, int* fd, SockAddr* actual);
// Connects, retrying refused connections until `d` (the listener may not be
// up yet).  `retryRefused` false: a refusal is an error at once (a peer
// known to have listened that refuses has closed its listener: it is gone).
ternResult_t connectBefore(const SockAddr& addr, Deadline d, int* fd, bool retryRefused = true);
ternResult_t sendAll(int fd, const void* buf, size_t n, Deadline d);
ternResult_t recvAll(int fd, void* buf, size_t n, Deadline d);
void setNonBlocking(int fd, bool on);
void setNoDelay(int fd);
// Marks a connected TCP socket with a flow class's DSCP: IP_TOS (IPv4 and
// v4-mapped) or IPV6_TCLASS carries dscp << 2 in every packet, then
// SO_PRIORITY (the kernel resets it whenever IP_TOS is set) picks the band
// of the host's own qdisc.  dscp 0 leaves the socket unmarked.
ternResult_t markSocket(int fd, int dscp, int soPriority);
void closeFd(int& fd);

// A port free on 127.0.0.1 right now (tests and benchmarks that start a job
// on loopback; another process may still take it before it is used).
inline int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);  // not closeFd: header-only, so benchmarks need not link the internals
  return ntohs(a.sin_port);
}

}  // namespace tern
