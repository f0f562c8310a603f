// Stands in for ucx.cc in builds without UCX: TERN_TRANSPORT=ucx is then a
// clear error at communicator creation (registry.cc), before any connection
// is made; a connection made anyway cannot open.
#include "base/error.h"
#include "transport/transport.h"

namespace tern {

struct UcxShared {};

namespace {
class AbsentUcxConn : public InertConn {
 public:
  const char* name() const override { return "ucx"; }
  ternResult_t open(const ConnSetup&) override {
    return setError(ternInvalidUsage, "TERN_TRANSPORT=ucx but tern was built without UCX "
                                      "(install libucx-dev and rebuild)");
  }
};
}  // namespace

bool ucxAvailable() { return false; }

std::shared_ptr<UcxShared> makeUcxShared(bool) { return std::make_shared<UcxShared>(); }

std::unique_ptr<Conn> makeUcxConn(const ConnSetup&, std::shared_ptr<UcxShared>) {
  return std::make_unique<AbsentUcxConn>();
}

}  // namespace tern
