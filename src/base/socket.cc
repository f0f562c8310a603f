#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/log.h"

namespace tern {

Deadline deadlineAfter(double seconds) {
  return Clock::now() + std::chrono::microseconds(static_cast<long long>(seconds * 1e6));
}

// Rounded up: a wait on a deadline less than a millisecond away sleeps in
// poll() for one, where 0 made every poll return at once, and a caller that
// loops until its deadline (AuthGate::tryNext with a deadline 1 ms away)
// spun a core for that last millisecond.
int msLeft(Deadline d, int cap) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(d - Clock::now()).count();
  if (left < 0) return 0;
  return left > cap ? cap : static_cast<int>(left);
}

std::string SockAddr::host() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
  if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host);
  return host;
}

std::string SockAddr::str() const {
  if (ss.ss_family == AF_INET) return host() + ":" + std::to_string(port());
  if (ss.ss_family == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return "?";
}

int SockAddr::port() const {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

void SockAddr::setPort(int p) {
  if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(p);
  if (ss.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(p);
}

ternResult_t parseHostPort(const std::string& s, SockAddr* out) {
  std::string host, port;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return setError(ternInvalidArgument, "address '" + s + "' is not of the form [v6addr]:port");
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos)
      return setError(ternInvalidArgument, "address '" + s + "' is not of the form host:port");
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res)
    return setError(ternInvalidArgument,
                    "cannot resolve address '" + s + "': " + gai_strerror(rc));
  memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  freeaddrinfo(res);
  return ternSuccess;
}

// NCCL's interface-list syntax: comma separated prefixes, '^' excludes, '=' exact.
static bool ifMatches(const std::string& spec, const char* name) {
  if (spec.empty()) return true;
  bool exclude = spec[0] == '^';
  std::string list = exclude ? spec.substr(1) : spec;
  bool exact = !list.empty() && list[0] == '=';
  if (exact) list = list.substr(1);
  bool hit = false;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty() && (exact ? item == name : strncmp(name, item.c_str(), item.size()) == 0))
      hit = true;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

ternResult_t pickInterface(const std::string& ifspec, SockAddr* out, std::string* ifname) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return setSysError("getifaddrs failed");
  const ifaddrs* chosen = nullptr;
  const ifaddrs* loopback = nullptr;
  for (int pass = 0; pass < 2 && !chosen; ++pass) {  // IPv4 first, then IPv6
    int family = pass == 0 ? AF_INET : AF_INET6;
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != family || !(i->ifa_flags & IFF_UP)) continue;
      if (family == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
        continue;
      bool lo = i->ifa_flags & IFF_LOOPBACK;
      if (!ifspec.empty()) {
        if (ifMatches(ifspec, i->ifa_name)) { chosen = i; break; }
      } else if (!lo) {
        chosen = i;
        break;
      } else if (!loopback) {
        loopback = i;
      }
    }
  }
  if (!chosen) chosen = ifspec.empty() ? loopback : nullptr;
  if (!chosen) {
    freeifaddrs(ifs);
    return setError(ternSystemError, "no network interface matches TERN_SOCKET_IFNAME='" +
                                         ifspec + "'");
  }
  out->len = chosen->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  memcpy(&out->ss, chosen->ifa_addr, out->len);
  out->setPort(0);
  if (ifname) *ifname = chosen->ifa_name;
  freeifaddrs(ifs);
  return ternSuccess;
}

ternResult_t listenOn(const SockAddr& bindAddr, int* fd, SockAddr* actual) {
  int s = socket(bindAddr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return setSysError("socket() failed");
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s, reinterpret_cast<const sockaddr*>(&bindAddr.ss), bindAddr.len) != 0) {
    ternResult_t r = setSysError("cannot bind a listener to " + bindAddr.str());
    close(s);
    return r;
  }
  // A burst of strangers must not fill the backlog before the gate accepts them.
  if (listen(s, SOMAXCONN) != 0) {
    ternResult_t r = setSysError("listen() failed");
    close(s);
    return r;
  }
  actual->len = sizeof actual->ss;
  getsockname(s, reinterpret_cast<sockaddr*>(&actual->ss), &actual->len);
  *fd = s;
  return ternSuccess;
}

static ternResult_t waitFd(int fd, short events, Deadline d, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = msLeft(d, 1000);
    int rc = poll(&p, 1, ms);
    if (rc > 0) return ternSuccess;
    if (rc < 0 && errno != EINTR) return setSysError(std::string("poll failed while ") + what);
    if (rc == 0 && ms == 0)
      return setError(ternTimeout, std::string("timed out ") + what);
  }
}

ternResult_t connectBefore(const SockAddr& addr, Deadline d, int* fd, bool retryRefused) {
  int delayMs = 1;
  for (;;) {
    int s = socket(addr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return setSysError("socket() failed");
    if (connect(s, reinterpret_cast<const sockaddr*>(&addr.ss), addr.len) == 0) {
      setNoDelay(s);
      *fd = s;
      return ternSuccess;
    }
    int e = errno;
    close(s);
    if (e == ECONNREFUSED && !retryRefused)
      return setError(ternRemoteError, "nothing listens at " + addr.str() + " any more");
    if (e != ECONNREFUSED && e != ETIMEDOUT && e != EAGAIN && e != EINTR && e != ENETUNREACH) {
      errno = e;
      return setSysError("cannot connect to " + addr.str());
    }
    if (Clock::now() >= d)
      return setError(ternTimeout, "timed out connecting to " + addr.str() +
                                       " (nobody listening)");
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    delayMs = std::min(delayMs * 2, 100);
  }
}

ternResult_t sendAll(int fd, const void* buf, size_t n, Deadline d) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) { p += k; n -= k; continue; }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      TERN_CHECK(waitFd(fd, POLLOUT, d, "sending to a peer"));
      continue;
    }
    return setError(ternRemoteError, std::string("connection lost while sending: ") +
                                         strerror(errno));
  }
  return ternSuccess;
}

ternResult_t recvAll(int fd, void* buf, size_t n, Deadline d) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) { p += k; n -= k; continue; }
    if (k == 0) return setError(ternRemoteError, "peer closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      TERN_CHECK(waitFd(fd, POLLIN, d, "waiting for a peer's message"));
      continue;
    }
    return setError(ternRemoteError, std::string("connection lost while receiving: ") +
                                         strerror(errno));
  }
  return ternSuccess;
}

void setNonBlocking(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

ternResult_t markSocket(int fd, int dscp, int soPriority) {
  if (dscp == 0) return ternSuccess;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return setSysError("cannot mark a socket with DSCP " + std::to_string(dscp));
  const int tos = dscp << 2;  // DSCP is the top 6 bits of the TOS / traffic class byte
  int ok = 0;
  if (ss.ss_family == AF_INET6) {
    ok = setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos);
    // A v4-mapped peer's packets are IPv4: they take IP_TOS (may be refused on pure v6).
    (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  } else {
    ok = setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  }
  // After IP_TOS: setting it overwrites the priority with the legacy TOS map.
  if (ok == 0) ok = setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &soPriority, sizeof soPriority);
  if (ok != 0) return setSysError("cannot mark a socket with DSCP " + std::to_string(dscp));
  return ternSuccess;
}

void closeFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace tern
