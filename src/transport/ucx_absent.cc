// Stands in for ucx.cc in builds without UCX: TERN_TRANSPORT=ucx is then a
// clear error at communicator creation.
#include "base/error.h"
#include "transport/transport.h"

namespace tern {

struct UcxShared {};

bool ucxAvailable() { return false; }

ternResult_t makeUcxConn(const ConnSetup&, std::shared_ptr<UcxShared>*, std::unique_ptr<Conn>*) {
  return setError(ternInvalidUsage, "TERN_TRANSPORT=ucx but tern was built without UCX "
                                    "(install libucx-dev and rebuild)");
}

}  // namespace tern
