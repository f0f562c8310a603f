// Stands in for ucx.cc in builds without UCX: TERN_TRANSPORT=ucx is then a
// clear error at communicator creation (registry.cc), before any connection
// is made; a connection made anyway cannot open.
#include "base/error.h"
#include "transport/transport.h"

namespace tern {

struct UcxShared {};

namespace {
class AbsentUcxConn : public Conn {
 public:
  const char* name() const override { return "ucx"; }
  ternResult_t open(const ConnSetup&) override {
    return setError(ternInvalidUsage, "TERN_TRANSPORT=ucx but tern was built without UCX "
                                      "(install libucx-dev and rebuild)");
  }
  size_t sendSpace(char**) override { return 0; }
  void sendCommit(size_t) override {}
  size_t recvAvail(const char**) override { return 0; }
  void recvConsume(size_t) override {}
  uint64_t sendPos() const override { return 0; }
  uint64_t recvPos() const override { return 0; }
};
}  // namespace

bool ucxAvailable() { return false; }

std::shared_ptr<UcxShared> makeUcxShared(bool) { return std::make_shared<UcxShared>(); }

std::unique_ptr<Conn> makeUcxConn(const ConnSetup&, std::shared_ptr<UcxShared>) {
  return std::make_unique<AbsentUcxConn>();
}

}  // namespace tern
