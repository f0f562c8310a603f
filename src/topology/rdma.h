// RDMA NIC discovery through rdma-core (libibverbs): what UCX could use for
// RDMA, reported once per process at INFO, with a UCX_NET_DEVICES suggestion.
// tern itself moves no data through verbs (UCX carries RDMA).
#pragma once
#include <string>
#include <vector>

#include "tern/tern.h"

namespace tern {

struct RdmaPort {
  std::string device;      // e.g. mlx5_0
  int port = 0;
  std::string linkLayer;   // InfiniBand | Ethernet
  std::string state;       // ACTIVE, DOWN, ...
  double gbps = 0;         // signalling rate x width
  std::string gid;         // GID index 0, as 8 groups of 4 hex digits
};

// Every port of every verbs device (empty without devices or without
// rdma-core in the build).
ternResult_t listRdmaPorts(std::vector<RdmaPort>* ports);
// "mlx5_0:1,mlx5_1:1" for the active ports, or "" when there are none.
std::string suggestUcxNetDevices(const std::vector<RdmaPort>& ports);
// Whether some port is ACTIVE (what makes UCX worth taking across hosts).
bool hasActiveRdmaPort(const std::vector<RdmaPort>& ports);
// The same for this host, read once per process (opening every device is
// not free, and ports do not come and go during a job).
bool hostHasActiveRdma();
// Logs the ports (or that there are none) at INFO, once per process.
void reportRdmaOnce();

}  // namespace tern
