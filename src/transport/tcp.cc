// TCP transport: one authenticated socket per peer and priority level,
// made when the level is first used: the lower rank dials the higher one's
// listener (so two ranks that start using a level at once make one socket,
// not two), authenticates and names the level; the higher rank's connection
// table admits it through its gate.  Both ends mark the socket with the
// level's flow class.  Nonblocking, with private staging fifos on both
// sides (faulted in as they are used).  progress() pushes committed bytes
// to the kernel and pulls whatever has arrived, in bursts, never blocking.
// A bulk connection (a level less urgent than one in use) keeps the kernel's
// share of its bytes short: see pushOut().
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/socket.h"
#include "transport/fifo.h"
#include "transport/transport.h"

namespace tern {

namespace {

class TcpConn : public Conn, public UnstagedIo {
 public:
  TcpConn(int peer, const Config& cfg)
      : peer_(peer), bulkQueued_(cfg.bulkQueued), unstagedMin_(cfg.tcpUnstaged), st_(cfg) {
    unstaged = this;
  }
  ~TcpConn() override { closeFd(fd_); }
  ternResult_t activate() override {
    if (st_.allocate() != ternSuccess) return setSysError("cannot allocate tcp staging buffers");
    return ternSuccess;
  }
  const char* name() const override { return "tcp"; }
  size_t sendSpace(char** p) override { return st_.send().writable(p); }
  void sendCommit(size_t n) override { st_.send().produce(n); }
  size_t recvAvail(const char** p) override { return st_.recv().readable(p); }
  uint64_t sendPos() const override { return st_.ready() ? send_().produced() : 0; }
  uint64_t recvPos() const override { return st_.ready() ? recv_().consumed() : 0; }
  void recvConsume(size_t n) override { st_.recv().consume(n); }
  bool flushed() const override { return !st_.ready() || send_().empty(); }
  bool wantsWritable() const override { return (!flushed() || sendBlocked_) && !capped_; }
  long cappedRecheckNs() const override { return capped_ ? recheckNs_ : 0; }
  int pollFd() const override { return fd_; }
  bool inputEnded() const override { return eof_ || (fd_ < 0 && peerGone()); }
  size_t kernelQueued() const override {
    int n = 0;
    return fd_ >= 0 && ioctl(fd_, SIOCOUTQ, &n) == 0 && n > 0 ? static_cast<size_t>(n) : 0;
  }
  ternResult_t open(const ConnSetup& s) override;

  ternResult_t progress(bool* moved) override {
    *moved = false;
    if (failed_) return broken(failedWhat_, failed_);
    TERN_CHECK(pushOut(moved));
    return pullIn(moved);
  }

  // Unstaged transfers (transport.h): the kernel copies between the caller's
  // buffer and the socket, as it copies between our fifo and the socket.
  // TERN_TCP_UNSTAGED, 64 KiB by default: below it a step's descriptor and
  // payload leave in one send(), which an unstaged payload would split in two.
  size_t minBytes() const override { return unstagedMin_; }

  size_t send(const char* src, size_t n) override {
    sendBlocked_ = false;
    if (!send_().empty() || failed_) return 0;  // staged bytes go first
    const size_t slice = boundedSlice(std::min(n, kSliceBytes));
    if (slice == 0) return 0;
    ssize_t k = ::send(fd_, src, slice, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      st_.send().pass(static_cast<size_t>(k));
      countSent(static_cast<uint64_t>(k));
      bytesUnstaged += static_cast<uint64_t>(k);
      return static_cast<size_t>(k);
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) sendBlocked_ = true;
    else fail("failed while sending", errno);
    return 0;
  }

  size_t recv(char* dst, size_t n, size_t more) override {
    if (!recv_().empty() || eof_ || failed_) return 0;  // what was staged goes first
    ssize_t k = ::recv(fd_, dst, std::min(n, kSliceBytes), MSG_DONTWAIT);
    if (k > 0) {
      st_.recv().pass(static_cast<size_t>(k));
      countRecv(static_cast<uint64_t>(k));
      bytesUnstaged += static_cast<uint64_t>(k);
      held_ = static_cast<size_t>(k) < n || more > 0;  // the step wants the rest from the kernel
      return static_cast<size_t>(k);
    }
    if (k == 0 || errno == ECONNRESET) {
      eof_ = gone = true;
      held_ = false;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      held_ = true;
    } else {
      fail("failed while receiving", errno);
    }
    return 0;
  }

 private:
  ternResult_t broken(const char* what, int err) {
    return setError(ternRemoteError, std::string("tcp connection to rank ") +
                                         std::to_string(peer_) + " " + what +
                                         (err ? std::string(": ") + strerror(err) : ""));
  }

  const Fifo& send_() const { return const_cast<Staging&>(st_).send(); }
  const Fifo& recv_() const { return const_cast<Staging&>(st_).recv(); }

  // Each call moves at most kSliceBytes each way: a send() or recv() of the
  // whole fifo copies 4 MiB in the kernel (2-3 ms on loopback here), and the
  // executor looks for more urgent work only between calls (measured: an
  // urgent caller waited 3 ms for the drive token behind one such call).
  static constexpr size_t kSliceBytes = 256 << 10;

  // A bulk connection hands the kernel no more than it may hold (bulkRoom):
  // unacknowledged bytes of a less urgent level, in the socket, the qdisc or
  // a shaper's FIFO downstream, are all ahead of the urgent level's next
  // message on the same link.  The bytes held back wait in our fifo, where
  // the engine's priorities still apply; the receiver keeps reading
  // regardless, so this is only a smaller send buffer and cannot deadlock.
  ternResult_t pushOut(bool* moved) {
    capped_ = false;
    for (size_t left = send_().empty() ? 0 : boundedSlice(kSliceBytes); left > 0;) {
      const char* p;
      size_t n = std::min(st_.send().readable(&p), left);
      if (n == 0) return ternSuccess;
      left -= n;
      ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        st_.send().consume(static_cast<size_t>(k));
        countSent(static_cast<uint64_t>(k));
        *moved = true;
        if (static_cast<size_t>(k) < n) return ternSuccess;
        continue;
      }
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return ternSuccess;
      return broken("failed while sending", errno);
    }
    return ternSuccess;
  }

  // At most `want` bytes, and on a bulk connection no more than it may add to
  // the kernel's queue now (capped_ says the bound cut it short).
  size_t boundedSlice(size_t want) {
    capped_ = false;
    if (!bulk || bulkQueued_ == 0) return want;
    const size_t room = bulkRoom();
    capped_ = room < want;
    return std::min(want, room);
  }

  // What a bulk connection may add to the kernel's queue now: the bound is
  // TERN_BULK_QUEUED or twice the path's bandwidth-delay product, whichever
  // is larger, so a long or fast path still runs at its full rate.  Also
  // when to look again if that cuts a push short: once a quarter of the
  // bound has drained at the path's delivery rate (a quarter: the kernel's
  // rate estimate runs low when ranks share cores, and an idle link costs
  // more than a wake-up).  A fixed 100 us re-poll pushed 12 KB per wake-up
  // at 1 Gbit/s: up to 10,000 wake-ups a second per rank while a bulk level
  // was capped, which 4 ranks' training steps on 2 cores pay for in compute.
  size_t bulkRoom() {
    const size_t bound = std::max(bulkQueued_, 2 * pathBdp());
    const size_t queued = kernelQueued();
    // A capped push fills the queue to the bound.
    recheckNs_ = rate_ ? static_cast<long>(std::min(5e5, std::max(5e4, bound / 4 * 1e9 / rate_))) : 100000;
    return queued < bound ? bound - queued : 0;
  }

  // The kernel's own estimates (delivery rate x minimum round trip), asked
  // at most once a millisecond.  0 until it has them.
  size_t pathBdp() {
    const auto now = std::chrono::steady_clock::now();
    if (now - bdpAt_ < std::chrono::milliseconds(1)) return bdp_;
    bdpAt_ = now;
    struct tcp_info ti {};
    socklen_t len = sizeof ti;
    if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        len >= offsetof(struct tcp_info, tcpi_delivery_rate) + sizeof ti.tcpi_delivery_rate) {
      rate_ = static_cast<double>(ti.tcpi_delivery_rate);
      bdp_ = static_cast<size_t>(rate_ * ti.tcpi_min_rtt * 1e-6);
    }
    return bdp_;
  }

  // An error met by an unstaged transfer, reported by the next progress().
  void fail(const char* what, int err) {
    failed_ = err ? err : EIO;
    failedWhat_ = what;
  }

  ternResult_t pullIn(bool* moved) {
    // Bytes an unstaged receive is about to take stay in the kernel for it
    // (held_: it asked for more than had come); it lets go once it has them.
    if (held_) return ternSuccess;
    // Until our own end of file, not until `gone`: the communicator marks
    // the connection gone when the peer's control socket closes, and what
    // the peer sent before it exited may still wait in the kernel.
    for (size_t left = kSliceBytes; left > 0 && !eof_;) {
      char* p;
      size_t n = std::min(st_.recv().writable(&p), left);
      if (n == 0) return ternSuccess;
      left -= n;
      ssize_t k = ::recv(fd_, p, n, MSG_DONTWAIT);
      if (k > 0) {
        st_.recv().produce(static_cast<size_t>(k));
        countRecv(static_cast<uint64_t>(k));
        *moved = true;
        if (static_cast<size_t>(k) < n) return ternSuccess;
        continue;
      }
      if (k == 0 || errno == ECONNRESET) {
        eof_ = gone = true;  // what arrived before stays readable in the fifo
        return ternSuccess;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ternSuccess;
      return broken("failed while receiving", errno);
    }
    return ternSuccess;
  }

  int fd_ = -1, peer_;
  bool eof_ = false;
  const size_t bulkQueued_;  // TERN_BULK_QUEUED (0: no bound)
  const size_t unstagedMin_;  // TERN_TCP_UNSTAGED (0: never)
  bool capped_ = false;      // the last push stopped at the bulk bound with bytes left
  bool sendBlocked_ = false;  // an unstaged send found the socket full: wait for POLLOUT
  bool held_ = false;         // an unstaged receive wants the next bytes from the kernel
  int failed_ = 0;            // errno of a failed unstaged transfer
  const char* failedWhat_ = "";
  size_t bdp_ = 0;
  double rate_ = 0;           // bytes/s the kernel last measured delivering (0: not yet)
  long recheckNs_ = 100000;   // capped_: when the queue will have room worth a push
  std::chrono::steady_clock::time_point bdpAt_{};
  Staging st_;
};

}  // namespace

// The higher rank first says it is there (its table admits the socket): the
// lower one dials only then, so a peer that died is seen on the control
// channel at once instead of by dialling a dead listener until the deadline.
ternResult_t TcpConn::open(const ConnSetup& s) {
  char here = 'r';
  ternResult_t r = s.rank < s.peer ? s.ch->recv(&here, 1, s.deadline) : s.ch->send(&here, 1, s.deadline);
  if (r == ternSuccess) r = s.rank < s.peer ? s.ch->dial(s.deadline, &fd_) : s.ch->accepted(s.deadline, &fd_);
  if (r == ternSuccess) r = markSocket(fd_, s.mark.dscp, s.mark.soPriority);
  if (r != ternSuccess) return r;  // the destructor closes what was made
  setNonBlocking(fd_, true);
  TERN_LOG(Trace, "tcp connection to rank %d at level %d (flow class %d, DSCP %d)", s.peer,
           s.level, s.mark.flowClass, s.mark.dscp);
  return ternSuccess;
}

std::unique_ptr<Conn> makeTcpConn(const ConnSetup& s) {
  return std::make_unique<TcpConn>(s.peer, *s.cfg);
}

}  // namespace tern
