#include "topology/rdma.h"

#include <cstdio>
#include <mutex>

#include "base/log.h"

#ifdef TERN_WITH_VERBS
#include <infiniband/verbs.h>
#endif

namespace tern {

#ifdef TERN_WITH_VERBS
namespace {

const char* stateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    default: return "OTHER";
  }
}

// IB speed code -> Gb/s per lane; width code -> lanes (ibv_query_port(3)).
double laneGbps(uint8_t speed) {
  switch (speed) {
    case 1: return 2.5; case 2: return 5; case 4: case 8: return 10; case 16: return 14;
    case 32: return 25; case 64: return 50; case 128: return 100; default: return 0;
  }
}
int lanes(uint8_t width) { return width == 1 ? 1 : width == 2 ? 4 : width == 4 ? 8 : width == 8 ? 12 : width == 16 ? 2 : 0; }

}  // namespace

ternResult_t listRdmaPorts(std::vector<RdmaPort>* ports) {
  ports->clear();
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return ternSuccess;  // no rdma-core providers / no devices
  for (int d = 0; d < n; ++d) {
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) continue;
    ibv_device_attr attr;
    if (ibv_query_device(ctx, &attr) == 0) {
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa;
        if (ibv_query_port(ctx, static_cast<uint8_t>(p), &pa)) continue;
        RdmaPort r;
        r.device = ibv_get_device_name(list[d]);
        r.port = p;
        r.linkLayer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
        r.state = stateName(pa.state);
        r.gbps = laneGbps(pa.active_speed) * lanes(pa.active_width);
        ibv_gid gid;
        if (ibv_query_gid(ctx, static_cast<uint8_t>(p), 0, &gid) == 0) {
          char buf[48];
          const uint8_t* g = gid.raw;
          snprintf(buf, sizeof buf, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
                   g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12],
                   g[13], g[14], g[15]);
          r.gid = buf;
        }
        ports->push_back(r);
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return ternSuccess;
}
#else
ternResult_t listRdmaPorts(std::vector<RdmaPort>* ports) {
  ports->clear();
  return ternSuccess;
}
#endif

std::string suggestUcxNetDevices(const std::vector<RdmaPort>& ports) {
  std::string s;
  for (const RdmaPort& p : ports)
    if (p.state == "ACTIVE") s += (s.empty() ? "" : ",") + p.device + ":" + std::to_string(p.port);
  return s;
}

bool hasActiveRdmaPort(const std::vector<RdmaPort>& ports) {
  return !suggestUcxNetDevices(ports).empty();
}

bool hostHasActiveRdma() {
  static const bool active = [] {
    std::vector<RdmaPort> ports;
    listRdmaPorts(&ports);
    return hasActiveRdmaPort(ports);
  }();
  return active;
}

void reportRdmaOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (logLevel() < LogLevel::Info) return;
    std::vector<RdmaPort> ports;
    listRdmaPorts(&ports);
    if (ports.empty()) {
      TERN_LOG(Info, "no RDMA devices found (rdma-core): UCX will use shared memory and tcp");
      return;
    }
    for (const RdmaPort& p : ports)
      TERN_LOG(Info, "RDMA %s port %d: %s, %s, %.0f Gb/s, GID %s", p.device.c_str(), p.port,
               p.linkLayer.c_str(), p.state.c_str(), p.gbps, p.gid.c_str());
    std::string suggest = suggestUcxNetDevices(ports);
    if (!suggest.empty()) TERN_LOG(Info, "suggested UCX_NET_DEVICES=%s", suggest.c_str());
  });
}

}  // namespace tern
