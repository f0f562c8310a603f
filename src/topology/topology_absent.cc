// Built without hwloc: no topology, and communicators go on without placement.
#include "base/error.h"
#include "topology/topology.h"

namespace tern {

ternResult_t loadTopology(const std::string&, Topology*) {
  return setError(ternInvalidUsage, "tern was built without hwloc (install libhwloc-dev and rebuild)");
}

}  // namespace tern
