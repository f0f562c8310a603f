// TCP transport: the authenticated mesh socket, nonblocking, with private
// pre-faulted staging fifos on both sides.  progress() pushes committed bytes
// to the kernel and pulls whatever has arrived, in bursts, never blocking.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "transport/fifo.h"
#include "transport/transport.h"

namespace tern {

namespace {

class TcpConn : public Conn {
 public:
  TcpConn(int fd, int peer, size_t cap) : fd_(fd), peer_(peer), cap_(cap) {
    bytes_ = fifoFootprint(cap);
    sendMem_ = allocPrefaulted(bytes_);
    recvMem_ = allocPrefaulted(bytes_);
    if (sendMem_) send_.attach(sendMem_, cap, true);
    if (recvMem_) recv_.attach(recvMem_, cap, true);
    setNonBlocking(fd_, true);
  }
  ~TcpConn() override {
    freePrefaulted(sendMem_, bytes_);
    freePrefaulted(recvMem_, bytes_);
  }
  bool ok() const { return sendMem_ && recvMem_; }
  const char* name() const override { return "tcp"; }
  size_t sendSpace(char** p) override { return send_.writable(p); }
  void sendCommit(size_t n) override { send_.produce(n); }
  size_t recvAvail(const char** p) override { return recv_.readable(p); }
  uint64_t sendPos() const override { return send_.produced(); }
  uint64_t recvPos() const override { return recv_.consumed(); }
  void recvConsume(size_t n) override { recv_.consume(n); }
  bool flushed() const override { return send_.empty(); }
  int pollFd() const override { return fd_; }

  ternResult_t progress(bool* moved) override {
    *moved = false;
    TERN_CHECK(pushOut(moved));
    return pullIn(moved);
  }

 private:
  ternResult_t broken(const char* what, int err) {
    return setError(ternRemoteError, std::string("tcp connection to rank ") +
                                         std::to_string(peer_) + " " + what +
                                         (err ? std::string(": ") + strerror(err) : ""));
  }

  ternResult_t pushOut(bool* moved) {
    for (;;) {
      const char* p;
      size_t n = send_.readable(&p);
      if (n == 0) return ternSuccess;
      ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        send_.consume(static_cast<size_t>(k));
        bytesSent += static_cast<uint64_t>(k);
        *moved = true;
        if (static_cast<size_t>(k) < n) return ternSuccess;
        continue;
      }
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return ternSuccess;
      return broken("failed while sending", errno);
    }
  }

  ternResult_t pullIn(bool* moved) {
    while (!gone) {
      char* p;
      size_t n = recv_.writable(&p);
      if (n == 0) return ternSuccess;
      ssize_t k = ::recv(fd_, p, n, MSG_DONTWAIT);
      if (k > 0) {
        recv_.produce(static_cast<size_t>(k));
        bytesRecv += static_cast<uint64_t>(k);
        *moved = true;
        if (static_cast<size_t>(k) < n) return ternSuccess;
        continue;
      }
      if (k == 0 || errno == ECONNRESET) {
        gone = true;  // what arrived before stays readable in the fifo
        return ternSuccess;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ternSuccess;
      return broken("failed while receiving", errno);
    }
    return ternSuccess;
  }

  int fd_, peer_;
  size_t cap_, bytes_;
  void *sendMem_, *recvMem_;
  Fifo send_, recv_;
};

}  // namespace

ternResult_t makeTcpConn(const ConnSetup& s, std::unique_ptr<Conn>* out) {
  auto c = std::make_unique<TcpConn>(s.meshFd, s.peer, s.cfg->fifoBytes);
  if (!c->ok()) return setSysError("cannot allocate tcp staging buffers");
  TERN_LOG(Info, "tcp connection to rank %d", s.peer);
  *out = std::move(c);
  return ternSuccess;
}

}  // namespace tern
