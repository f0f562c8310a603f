// Loopback connection for a rank that sends to itself inside a group.
#include "transport/fifo.h"
#include "transport/transport.h"

namespace tern {

namespace {
class SelfConn : public Conn {
 public:
  explicit SelfConn(size_t cap) : bytes_(fifoFootprint(cap)), mem_(allocPrefaulted(bytes_)) {
    if (mem_) fifo_.attach(mem_, cap, true);
  }
  ~SelfConn() override { freePrefaulted(mem_, bytes_); }
  bool ok() const { return mem_ != nullptr; }
  const char* name() const override { return "self"; }
  size_t sendSpace(char** p) override { return fifo_.writable(p); }
  void sendCommit(size_t n) override { fifo_.produce(n); }
  size_t recvAvail(const char** p) override { return fifo_.readable(p); }
  void recvConsume(size_t n) override { fifo_.consume(n); }
  uint64_t sendPos() const override { return fifo_.produced(); }
  uint64_t recvPos() const override { return fifo_.consumed(); }

 private:
  size_t bytes_;
  void* mem_;
  Fifo fifo_;
};
}  // namespace

ternResult_t makeSelfConn(const Config& cfg, std::unique_ptr<Conn>* out) {
  auto c = std::make_unique<SelfConn>(cfg.fifoBytes);
  if (!c->ok()) return ternSystemError;
  *out = std::move(c);
  return ternSuccess;
}

}  // namespace tern
