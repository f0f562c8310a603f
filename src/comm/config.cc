#include "comm/config.h"

#include <cstddef>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "base/error.h"
#include "codec/fifo_quantum.h"

namespace tern {

namespace {

ternResult_t bad(const std::string& what) {
  return setError(ternInvalidArgument, "ternCommInitRankConfig: " + what);
}

// The caller's struct, copied as far as it reaches; the rest keeps the
// initializer's "unset" values.
ternResult_t copySized(const ternConfig_t* user, ternConfig_t* out) {
  const ternConfig_t unset = TERN_CONFIG_INITIALIZER;
  *out = unset;
  if (user->magic != TERN_CONFIG_MAGIC)
    return bad("config->magic is not TERN_CONFIG_MAGIC (initialize the struct with "
               "TERN_CONFIG_INITIALIZER)");
  if (user->size < offsetof(ternConfig_t, blocking))
    return bad("config->size " + std::to_string(user->size) + " is too small for a ternConfig_t");
  memcpy(out, user, std::min(user->size, sizeof *out));
  out->size = sizeof *out;
  return ternSuccess;
}

}  // namespace

ternTernaryConfig_t ternaryConfigFromEnv(std::string* malformed) {
  ternTernaryConfig_t c;
  c.seed = static_cast<unsigned long long>(envInt("TERN_TERNARY_SEED", 0x7465726e, malformed));
  c.blockSize = static_cast<int>(envInt("TERN_TERNARY_BLOCK", 256, malformed));  // docs/TERNARY.md: why 256
  c.clip = static_cast<float>(envDouble("TERN_TERNARY_CLIP", 0.0, malformed));
  c.errorFeedback = static_cast<int>(envInt("TERN_TERNARY_EF", 0, malformed));
  c.minBytes = static_cast<size_t>(envInt("TERN_TERNARY_MIN_BYTES", 64 << 10, malformed));
  return c;
}

const char* ternaryConfigProblem(const ternTernaryConfig_t& c) {
  if (c.blockSize < 64 || c.blockSize % 64) return "blockSize must be a positive multiple of 64";
  if (!(c.clip >= 0)) return "clip must be >= 0 (0 turns clipping off)";
  if (c.errorFeedback != 0 && c.errorFeedback != 1) return "errorFeedback must be 0 or 1";
  return nullptr;
}

int flowClassOf(int level, int flowClasses) {
  if (flowClasses == 3) {  // docs/DESIGN.md: levels 0-1, 2-5, 6-7
    static const int three[8] = {0, 0, 1, 1, 1, 1, 2, 2};
    return three[level];
  }
  return level * flowClasses / TERN_PRIORITY_LEVELS;
}

// SO_PRIORITY by the class's rank, in the kernel's TC_PRIO_* terms, which
// the default qdiscs (pfifo_fast, prio) map to bands 0/1/2: the most urgent
// class is INTERACTIVE (6, band 0), the least urgent BULK (2, band 2), any
// between BESTEFFORT (0, band 1).  Not the legacy TOS map, which would put
// EF (0xb8) in INTERACTIVE_BULK, and all within 0..6 (no CAP_NET_ADMIN).
int flowSoPriority(int flowClass, int flowClasses) {
  if (flowClasses > 1 && flowClass == 0) return 6;
  if (flowClasses > 1 && flowClass == flowClasses - 1) return 2;
  return 0;
}

std::array<int, TERN_PRIORITY_LEVELS> flowClassTable(const Config& cfg) {
  std::array<int, TERN_PRIORITY_LEVELS> t{};
  for (int l = 0; l < TERN_PRIORITY_LEVELS; ++l) t[l] = flowClassOf(l, cfg.flowClasses);
  return t;
}

FlowMark flowMarkOf(const Config& cfg, int level) {
  int k = flowClassOf(level, cfg.flowClasses);
  return FlowMark{k, cfg.dscp[k], flowSoPriority(k, cfg.flowClasses), cfg.ibSl[k], cfg.ibTrafficClass[k]};
}

std::string describeFlows(const Config& cfg) {
  std::string s = "flow classes (level -> DSCP, TOS byte, SO_PRIORITY):";
  for (int lo = 0; lo < TERN_PRIORITY_LEVELS;) {
    FlowMark m = flowMarkOf(cfg, lo);
    int hi = lo;
    while (hi + 1 < TERN_PRIORITY_LEVELS && flowClassOf(hi + 1, cfg.flowClasses) == m.flowClass) ++hi;
    char buf[96];
    snprintf(buf, sizeof buf, " levels %d-%d -> class %d DSCP %d (0x%02x, %d)%s", lo, hi,
             m.flowClass, m.dscp, m.dscp << 2, m.dscp ? m.soPriority : 0,
             hi + 1 < TERN_PRIORITY_LEVELS ? ";" : "");
    s += buf;
    lo = hi + 1;
  }
  bool on = false;
  for (int k = 0; k < cfg.flowClasses; ++k) on |= cfg.dscp[k] != 0;
  return s + (on ? "; control sockets take class 0's mark" : "; marking off (all DSCP 0)");
}

namespace {

// Defaults (docs/DESIGN.md, "Priority in the network"): EF for the most
// urgent class, AF11 for the least urgent, AF21 between; a single class has
// no one to overtake and stays unmarked.  AF11, not CS1: RFC 4594 gives bulk
// data with an assured rate AF1x and keeps CS1 for traffic that yields to
// best effort, and a job's gradients are its work (2026-12-04: behind a
// switch that serves CS1 with best effort, marks gained nothing against a
// competing flow; docs/NETWORK_PRIORITY.md).
void defaultDscp(int n, int* dscp) {
  for (int k = 0; k < TERN_PRIORITY_LEVELS; ++k) dscp[k] = 0;
  if (n < 2) return;
  for (int k = 0; k < n; ++k) dscp[k] = k == 0 ? 46 : k == n - 1 ? 10 : 18;
}

// A per-class list in the environment: its variable, what one value is, and
// the range of values.
struct ClassList {
  const char* var;
  const char* what;
  int lo, hi;
};

ternResult_t badList(const ClassList& l, const std::string& list, const std::string& why) {
  return setError(ternInvalidArgument, std::string(l.var) + "=\"" + list + "\" " + why);
}

// Exactly n comma-separated integers in l's range (n = the flow classes).
ternResult_t parseClassList(const ClassList& l, const std::string& list, int n, int* out) {
  std::vector<int> v;
  for (size_t pos = 0;;) {
    size_t comma = list.find(',', pos);
    std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long x = strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0')
      return badList(l, list, "is not a comma-separated list of integers (\"" + item + "\")");
    if (x < l.lo || x > l.hi)
      return badList(l, list, "has " + std::string(l.what) + " " + item + ", not in " +
                                  std::to_string(l.lo) + ".." + std::to_string(l.hi));
    v.push_back(static_cast<int>(x));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (static_cast<int>(v.size()) != n)
    return badList(l, list, "has " + std::to_string(v.size()) + " values for " +
                                std::to_string(n) + " flow classes");
  std::copy(v.begin(), v.end(), out);
  return ternSuccess;
}

const ClassList kDscpList{"TERN_FLOW_DSCP", "DSCP", 0, 63};
const ClassList kIbSlList{"TERN_UCX_IB_SL", "IB service level", 0, 15};
const ClassList kIbTcList{"TERN_UCX_IB_TRAFFIC_CLASS", "IB traffic class", 0, 255};

// UCX's IB settings per class (its contexts, transport/ucx.cc): the service
// level only where TERN_UCX_IB_SL says (IB fabrics map SLs their own way);
// the traffic class from TERN_UCX_IB_TRAFFIC_CLASS, else the class's DSCP
// in the TOS byte's place (what RoCE carries in its IP header) unless the
// user set UCX_IB_TRAFFIC_CLASS for every context, or marking is off.
ternResult_t resolveIb(Config* cfg) {
  const int n = cfg->flowClasses;
  if (!cfg->ibSlList.empty()) TERN_CHECK(parseClassList(kIbSlList, cfg->ibSlList, n, cfg->ibSl));
  if (!cfg->ibTcList.empty()) return parseClassList(kIbTcList, cfg->ibTcList, n, cfg->ibTrafficClass);
  if (getenv("UCX_IB_TRAFFIC_CLASS")) return ternSuccess;
  for (int k = 0; k < n; ++k) cfg->ibTrafficClass[k] = cfg->dscp[k] ? cfg->dscp[k] << 2 : -1;
  return ternSuccess;
}

// DSCP per class: defaults, then TERN_FLOW_DSCP, then the struct's
// trafficClass fields that are set (u may be NULL).  The environment is
// read only when the struct leaves a class unset.
ternResult_t resolveDscp(const ternConfig_t* u, Config* cfg) {
  const int n = cfg->flowClasses;
  bool allSet = u != nullptr;
  for (int k = 0; k < TERN_PRIORITY_LEVELS && u; ++k) {
    int d = u->trafficClass[k];
    if (d == TERN_CONFIG_UNDEF_INT) {
      allSet &= k >= n;
      continue;
    }
    if (d < 0 || d > 63)
      return bad("DSCP " + std::to_string(d) + " of flow class " + std::to_string(k) +
                 " (config->trafficClass[" + std::to_string(k) + "]) is not in 0..63");
    if (k >= n)
      return bad("config->trafficClass[" + std::to_string(k) + "] is set but there are only " +
                 std::to_string(n) + " flow classes");
  }
  defaultDscp(n, cfg->dscp);
  if (!allSet && !cfg->dscpList.empty()) TERN_CHECK(parseClassList(kDscpList, cfg->dscpList, n, cfg->dscp));
  for (int k = 0; k < n && u; ++k)
    if (u->trafficClass[k] != TERN_CONFIG_UNDEF_INT) cfg->dscp[k] = u->trafficClass[k];
  return resolveIb(cfg);
}

}  // namespace

ternResult_t resolveFlows(const ternConfig_t* u, Config* cfg) {
  if (u && u->flowClasses != TERN_CONFIG_UNDEF_INT) cfg->flowClasses = u->flowClasses;
  if (cfg->flowClasses < 1 || cfg->flowClasses > TERN_PRIORITY_LEVELS)
    return setError(ternInvalidArgument,
                    std::string(u && u->flowClasses != TERN_CONFIG_UNDEF_INT
                                    ? "ternCommInitRankConfig: config->flowClasses"
                                    : "TERN_FLOW_CLASSES") +
                        ": flow classes " + std::to_string(cfg->flowClasses) + " is not in 1..8");
  return resolveDscp(u, cfg);
}

int algoCode(const std::string& name) {
  for (size_t i = 0; i < std::size(kAlgoNames); ++i)
    if (name == kAlgoNames[i]) return static_cast<int>(i);
  return -1;
}

ternResult_t agreeAlgo(const std::vector<uint32_t>& codes, const std::vector<uint64_t>& hashes) {
  auto name = [](uint32_t c) { return c < std::size(kAlgoNames) ? kAlgoNames[c] : "?"; };
  for (size_t r = 1; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0])
      return setError(ternInvalidUsage,
                      "rank " + std::to_string(r) + (hashes[r] ? " has a" : " has no") +
                          " TERN_MODEL_FILE model" + (hashes[0] ? " unlike rank 0's" : " but rank 0 has one") +
                          ": ranks would choose an allreduce's algorithm differently; give every rank "
                          "the same model file");
  for (size_t r = 1; r < codes.size(); ++r)
    if (codes[r] != codes[0])
      return setError(ternInvalidUsage, "rank " + std::to_string(r) + " has TERN_ALGO=" + name(codes[r]) +
                                            " but rank 0 has TERN_ALGO=" + name(codes[0]) +
                                            ": ranks would plan the same allreduce differently; set "
                                            "TERN_ALGO the same on every rank");
  return ternSuccess;
}

ternResult_t resolveConfig(const ternConfig_t* user, int nranks, Config* cfg) {
  if (algoCode(cfg->algo) < 0)
    return setError(ternInvalidArgument,
                    "TERN_ALGO='" + cfg->algo + "' is not one of auto, ring, rd, twolevel");
  size_t q = ternaryFifoQuantum(nranks);
  cfg->fifoBytes = (cfg->fifoBytes + q - 1) / q * q;
  cfg->fifoGranule = q;  // every unit the engine aligns on divides it
  cfg->ternary = ternaryConfigFromEnv(&cfg->malformedEnv);
  if (!cfg->malformedEnv.empty()) return setError(ternInvalidArgument, cfg->malformedEnv);
  if (const char* why = ternaryConfigProblem(cfg->ternary))
    return setError(ternInvalidArgument, std::string("TERN_TERNARY_*: ") + why);
  if (!user) return resolveFlows(nullptr, cfg);
  ternConfig_t u;
  TERN_CHECK(copySized(user, &u));
  if (u.blocking != TERN_CONFIG_UNDEF_INT) {
    if (u.blocking != 0 && u.blocking != 1)
      return bad("config->blocking must be 0 or 1, not " + std::to_string(u.blocking));
    cfg->blocking = u.blocking == 1;
  }
  if (u.timeoutSeconds != TERN_CONFIG_UNDEF_DOUBLE) {
    if (!(u.timeoutSeconds > 0))
      return bad("config->timeoutSeconds must be > 0, not " + std::to_string(u.timeoutSeconds));
    cfg->timeoutSec = u.timeoutSeconds;
  }
  TERN_CHECK(resolveFlows(&u, cfg));
  if (u.ternarySet) {
    ternTernaryConfig_t t{u.ternary.seed, u.ternary.blockSize, u.ternary.clip,
                          u.ternary.errorFeedback, u.ternary.minBytes};
    if (const char* why = ternaryConfigProblem(t)) return bad(std::string("config->ternary: ") + why);
    cfg->ternary = t;
  }
  return ternSuccess;
}

}  // namespace tern
