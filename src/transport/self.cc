// Loopback connection for a rank that sends to itself inside a group.
#include "base/error.h"
#include "transport/fifo.h"
#include "transport/transport.h"

namespace tern {

namespace {
class SelfConn : public Conn {
 public:
  explicit SelfConn(const Config& cfg) : st_(cfg) {}
  ternResult_t activate() override {
    if (st_.allocate() != ternSuccess) return setSysError("cannot allocate a loopback fifo");
    return ternSuccess;
  }
  const char* name() const override { return "self"; }
  size_t sendSpace(char** p) override { return st_.send().writable(p); }
  void sendCommit(size_t n) override { st_.send().produce(n); }
  size_t recvAvail(const char** p) override { return st_.send().readable(p); }
  void recvConsume(size_t n) override { st_.send().consume(n); }
  uint64_t sendPos() const override { return st_.ready() ? fifo().produced() : 0; }
  uint64_t recvPos() const override { return st_.ready() ? fifo().consumed() : 0; }

 private:
  const Fifo& fifo() const { return const_cast<Staging&>(st_).send(); }
  Staging st_;  // one fifo used both ways (the recv half stays unused)
};
}  // namespace

std::unique_ptr<Conn> makeSelfConn(const Config& cfg) {
  return std::make_unique<SelfConn>(cfg);
}

}  // namespace tern
