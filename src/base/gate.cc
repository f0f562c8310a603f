#include "base/gate.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <thread>

#include "base/error.h"
#include "base/reject_log.h"

namespace tern {

namespace {
// Handshakes under way at once; beyond it the oldest is dropped (a rank
// finishes its handshake in milliseconds, so the oldest is a stranger).
constexpr size_t kMaxPending = 256;
constexpr int kAcceptsPerWake = 64;  // then serve the handshakes again
}  // namespace

AuthGate::AuthGate(int lfd, const Secret& s, ConnKind kind, size_t trailerBytes,
                   double handshakeSec, std::string who)
    : lfd_(lfd), secret_(s), kind_(kind), trailerBytes_(trailerBytes),
      handshakeSec_(handshakeSec), who_(std::move(who)) {
  setNonBlocking(lfd_, true);
}

AuthGate::~AuthGate() {
  for (Pending& p : pending_) drop(p, "handshake unfinished when the listener closed");
  for (Admitted& a : ready_) closeFd(a.fd);
  flushRejected(who_);
}

void AuthGate::drop(Pending& p, const std::string& why) {
  logRejected(who_, p.from, why);
  closeFd(p.fd);
}

void AuthGate::refuse(Admitted& a, const std::string& why) {
  logRejected(who_, a.from, why);
  closeFd(a.fd);
}

bool AuthGate::serve(Pending& p, const char** why) {
  const size_t need = p.proven ? trailerBytes_ : kAuthProofBytes;
  while (p.in.size() < need) {
    char buf[64];
    // Never more than this message: what follows the trailer is the caller's.
    ssize_t k = recv(p.fd, buf, std::min(sizeof buf, need - p.in.size()), MSG_DONTWAIT);
    if (k > 0) {
      p.in.append(buf, static_cast<size_t>(k));
      continue;
    }
    if (k == 0) {
      *why = "closed before finishing the handshake";
      return false;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
    *why = "connection error during the handshake";
    return false;
  }
  if (p.proven) return true;  // trailer complete
  uint8_t reply[kAuthReplyBytes];
  *why = authVerify(secret_, kind_, p.challenge, reinterpret_cast<const uint8_t*>(p.in.data()),
                    reply, &p.rank);
  if (*why) return false;
  // 16 bytes into a fresh socket's empty send buffer: they go at once or never.
  if (send(p.fd, reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof reply) {
    *why = "could not be answered";
    return false;
  }
  p.proven = true;
  p.in.clear();
  // A fresh window for the trailer: the proof may have waited in the socket
  // while the owner of the gate was busy elsewhere (between mesh phases).
  p.until = deadlineAfter(handshakeSec_);
  return serve(p, why);  // the trailer may be there already
}

void AuthGate::acceptNew() {
  for (int i = 0; i < kAcceptsPerWake; ++i) {
    Pending p{};
    p.from.len = sizeof p.from.ss;
    p.fd = accept4(lfd_, reinterpret_cast<sockaddr*>(&p.from.ss), &p.from.len,
                   SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (p.fd < 0) {
      // Out of descriptors: make room by dropping the oldest handshake, or
      // (none to drop) wait a little instead of spinning on the listener.
      if (errno == EMFILE || errno == ENFILE) {
        if (pending_.empty()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        } else {
          drop(pending_.front(), "dropped for lack of file descriptors");
          pending_.erase(pending_.begin());
        }
      }
      return;
    }
    if (pending_.size() >= kMaxPending) {
      drop(pending_.front(), "too many handshakes under way");
      pending_.erase(pending_.begin());
    }
    setNoDelay(p.fd);
    p.until = deadlineAfter(handshakeSec_);
    uint8_t hello[kAuthHelloBytes];
    authChallenge(&p.challenge, hello);
    if (send(p.fd, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof hello) {
      drop(p, "could not be greeted");
      continue;
    }
    pending_.push_back(std::move(p));
  }
}

// One wait: serve the handshakes that have bytes, accept newcomers, drop the
// ones whose time is up.  Bytes are read before deadlines are checked, so a
// rank whose proof arrived while nobody polled is not dropped for it.
void AuthGate::pollOnce(Deadline d) {
  std::vector<pollfd> fds{{lfd_, POLLIN, 0}};
  Deadline wake = d;
  for (const Pending& p : pending_) {
    fds.push_back({p.fd, POLLIN, 0});
    wake = std::min(wake, p.until);
  }
  if (poll(fds.data(), fds.size(), msLeft(wake, 1000)) < 0) return;  // EINTR: the caller loops
  for (size_t i = 1; i < fds.size(); ++i) {
    Pending& p = pending_[i - 1];
    if (!fds[i].revents) continue;
    const char* why = nullptr;
    if (!serve(p, &why)) {
      drop(p, why);
    } else if (p.proven && p.in.size() == trailerBytes_) {
      setNonBlocking(p.fd, false);
      ready_.push_back(Admitted{p.fd, p.rank, p.from, std::move(p.in)});
      p.fd = -1;
    }
  }
  auto now = Clock::now();
  for (Pending& p : pending_)
    if (p.fd >= 0 && now >= p.until) {
      char why[96];
      snprintf(why, sizeof why, "no complete handshake within %g s (TERN_HANDSHAKE_TIMEOUT)",
               handshakeSec_);
      drop(p, why);
    }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const Pending& p) { return p.fd < 0; }),
                 pending_.end());
  if (fds[0].revents) acceptNew();
}

bool AuthGate::addPollFds(std::vector<pollfd>* fds) const {
  for (const Pending& p : pending_) fds->push_back({p.fd, POLLIN, 0});
  return !pending_.empty();
}

bool AuthGate::tryNext(Deadline d, Admitted* out) {
  // One look before the deadline is checked: a deadline already passed
  // serves what has bytes now and returns without sleeping.
  for (bool looked = false; ready_.empty(); looked = true) {
    if (looked && Clock::now() >= d) return false;
    pollOnce(d);
  }
  *out = std::move(ready_.front());
  ready_.pop_front();
  return true;
}

ternResult_t AuthGate::next(Deadline d, Admitted* out) {
  if (tryNext(d, out)) return ternSuccess;
  return setError(ternTimeout, "timed out waiting for a connection");
}

}  // namespace tern
