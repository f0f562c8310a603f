// ncclConfig_t as NCCL itself reads it, so a struct compiled against an older
// (smaller) or newer (larger) nccl.h is accepted: the leading size_t says how
// many bytes the caller has, the magic that NCCL_CONFIG_INITIALIZER was used,
// and `version` which fields that header had (a field newer than the caller's
// header keeps its "unset" value whatever bytes sit there).
#include <climits>
#include <cstddef>
#include <cstring>

#include "nccl_shim/shim.h"

namespace shim {
namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;  // NCCL_CONFIG_INITIALIZER's magic

constexpr int ver(int major, int minor) { return major * 10000 + minor * 100; }  // NCCL_VERSION for >= 2.9

// When NCCL's header introduced each field after the first three.
struct Field {
  size_t offset, size;
  int since;
};
#define NCCL_FIELD(name, major, minor) \
  { offsetof(ncclConfig_t, name), sizeof(ncclConfig_t::name), ver(major, minor) }
const Field kFields[] = {
    NCCL_FIELD(blocking, 2, 14),       NCCL_FIELD(cgaClusterSize, 2, 17),
    NCCL_FIELD(minCTAs, 2, 17),        NCCL_FIELD(maxCTAs, 2, 17),
    NCCL_FIELD(netName, 2, 17),        NCCL_FIELD(splitShare, 2, 18),
    NCCL_FIELD(trafficClass, 2, 25),   NCCL_FIELD(collnetEnable, 2, 27),
    NCCL_FIELD(CTAPolicy, 2, 27),      NCCL_FIELD(shrinkShare, 2, 27),
    NCCL_FIELD(nvlsCTAs, 2, 27),       NCCL_FIELD(nChannelsPerNetPeer, 2, 28),
    NCCL_FIELD(nvlinkCentricSched, 2, 28),
};
#undef NCCL_FIELD

// The caller's struct over an initializer, then the fields its header did
// not have back to "unset".
void copyVersioned(const ncclConfig_t* user, ncclConfig_t* c) {
  size_t size;
  memcpy(&size, user, sizeof size);
  memcpy(c, user, size < sizeof *c ? size : sizeof *c);
  const ncclConfig_t unset = NCCL_CONFIG_INITIALIZER;
  for (const Field& f : kFields)
    if (static_cast<int>(c->version) < f.since)
      memcpy(reinterpret_cast<char*>(c) + f.offset, reinterpret_cast<const char*>(&unset) + f.offset,
             f.size);
}

bool set(int v) { return v != NCCL_CONFIG_UNDEF_INT; }
bool flagOk(int v) { return !set(v) || v == 0 || v == 1; }
bool positiveOk(int v) { return !set(v) || v > 0; }

// The checks NCCL makes: a value NCCL would refuse is refused here too.
ncclResult_t validate(const ncclConfig_t& c) {
  struct { const char* name; bool ok; } checks[] = {
      {"blocking (0 or 1)", flagOk(c.blocking)},
      {"cgaClusterSize (>= 0)", !set(c.cgaClusterSize) || c.cgaClusterSize >= 0},
      {"minCTAs (> 0)", positiveOk(c.minCTAs)},
      {"maxCTAs (> 0, >= minCTAs)",
       positiveOk(c.maxCTAs) && (!set(c.minCTAs) || !set(c.maxCTAs) || c.minCTAs <= c.maxCTAs)},
      {"splitShare (0 or 1)", flagOk(c.splitShare)},
      {"trafficClass (0..255)", !set(c.trafficClass) || (c.trafficClass >= 0 && c.trafficClass <= 255)},
      {"collnetEnable (0 or 1)", flagOk(c.collnetEnable)},
      {"CTAPolicy (a NCCL_CTA_POLICY_* value)",
       !set(c.CTAPolicy) || (c.CTAPolicy >= 0 && c.CTAPolicy <= NCCL_CTA_POLICY_ZERO)},
      {"shrinkShare (0 or 1)", flagOk(c.shrinkShare)},
      {"nvlsCTAs (> 0)", positiveOk(c.nvlsCTAs)},
      {"nChannelsPerNetPeer (> 0)", positiveOk(c.nChannelsPerNetPeer)},
      {"nvlinkCentricSched (0 or 1)", flagOk(c.nvlinkCentricSched)},
  };
  for (const auto& k : checks)
    if (!k.ok) return fail(ncclInvalidArgument, "ncclConfig_t: invalid %s", k.name);
  return ncclSuccess;
}

}  // namespace

ncclResult_t readConfig(const ncclConfig_t* user, ternConfig_t* out, std::string* name) {
  if (!user) return ncclSuccess;  // defaults (or the parent's, for Split / Shrink)
  size_t size;
  memcpy(&size, user, sizeof size);
  if (size < offsetof(ncclConfig_t, blocking))
    return fail(ncclInvalidArgument,
                "ncclConfig_t: size %zu is too small (initialize it with NCCL_CONFIG_INITIALIZER)", size);
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  copyVersioned(user, &c);
  if (c.magic != kConfigMagic)
    return fail(ncclInvalidArgument,
                "ncclConfig_t: magic is 0x%x, not 0x%x (initialize it with NCCL_CONFIG_INITIALIZER)", c.magic,
                kConfigMagic);
  if (ncclResult_t r = validate(c)) return r;
  if (set(c.blocking)) out->blocking = c.blocking;
  // NCCL's trafficClass is the IP/IB traffic-class byte; its top six bits
  // are the DSCP tern marks every flow class with.
  if (set(c.trafficClass)) {
    out->flowClasses = 1;
    out->trafficClass[0] = c.trafficClass >> 2;
  }
  if (c.commName) *name = c.commName;
  // The rest (CTAs, CGA clusters, NVLS, CollNet, netName, share flags) steer
  // GPU kernels and NCCL's own networks: tern's host path has no such knob.
  return ncclSuccess;
}

}  // namespace shim
