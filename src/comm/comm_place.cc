// Where a rank's work goes on its host: hwloc topology -> GPU, NIC and
// progress-thread core (decided in topology/placement.cc), applied here.
#include <cstdio>
#include <cstdlib>

#include "comm/comm.h"
#include "base/error.h"
#include "base/log.h"
#include "topology/topology.h"

namespace tern {

namespace {

// "%r" becomes the rank; without it, ranks of a multi-rank job get ".<rank>"
// appended so they do not overwrite each other.
std::string dumpPath(const std::string& pattern, int rank, int nranks) {
  std::string p = pattern;
  size_t at = p.find("%r");
  if (at != std::string::npos) return p.replace(at, 2, std::to_string(rank));
  return nranks > 1 ? p + "." + std::to_string(rank) : p;
}

ternResult_t writeDump(const std::string& path, const std::string& text) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) return setError(ternSystemError, "TERN_TOPO_DUMP: cannot write '" + path + "'");
  bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = fclose(f) == 0 && ok;
  return ok ? ternSuccess : setError(ternSystemError, "TERN_TOPO_DUMP: short write to '" + path + "'");
}

}  // namespace

ternResult_t placeComm(Comm& c, PuSet* bindCpus) {
  if (c.cfg.pinMode != "auto" && c.cfg.pinMode != "on" && c.cfg.pinMode != "off")
    return setError(ternInvalidArgument,
                    "TERN_PIN_PROGRESS='" + c.cfg.pinMode + "' is not one of auto, on, off");
  const int localRank = c.hosts.localRank[c.rank], localSize = c.hosts.localSize(c.rank);
  Topology t;
  if (loadTopology(c.cfg.topoXml, &t) != ternSuccess) {
    if (!c.cfg.topoXml.empty()) return ternInvalidArgument;  // asked for: an error
    TERN_LOG(Info, "no topology (%s); no placement", lastThreadError().c_str());
    return ternSuccess;
  }
  Placement p = decidePlacement(t, localRank, localSize, c.cfg.gpu, c.cfg.pinMode);
  TERN_LOG(Info, "placement: %s", p.why.c_str());
  // A topology read from XML is a what-if: decided and reported, not applied
  // (its CPUs and NICs are not this host's).  The NIC choice reaches UCX for
  // RDMA NICs only: sockets must use an address every peer can reach, which
  // TERN_SOCKET_IFNAME governs.
  if (c.cfg.topoXml.empty()) {
    if (p.nic >= 0 && !t.nics[p.nic].rdmaName.empty() && !getenv("UCX_NET_DEVICES"))
      c.cfg.ucxNetDevices = t.nics[p.nic].rdmaName + ":1";
    *bindCpus = p.pinPus;
  }
  if (c.cfg.topoDump.empty()) return ternSuccess;
  return writeDump(dumpPath(c.cfg.topoDump, c.rank, c.nranks), describeTopology(t, p, c.rank, c.nranks));
}

}  // namespace tern
