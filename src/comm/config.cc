#include "comm/config.h"

#include <cstddef>
#include <cstring>
#include <string>

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

ternTernaryConfig_t ternaryConfigFromEnv() {
  ternTernaryConfig_t c;
  c.seed = static_cast<unsigned long long>(envInt("TERN_TERNARY_SEED", 0x7465726e));
  c.blockSize = static_cast<int>(envInt("TERN_TERNARY_BLOCK", 256));  // docs/TERNARY.md: why 256
  const char* clip = getenv("TERN_TERNARY_CLIP");
  c.clip = clip && *clip ? static_cast<float>(atof(clip)) : 0.0f;
  c.errorFeedback = static_cast<int>(envInt("TERN_TERNARY_EF", 0));
  c.minBytes = static_cast<size_t>(envInt("TERN_TERNARY_MIN_BYTES", 64 << 10));
  return c;
}

const char* ternaryConfigProblem(const ternTernaryConfig_t& c) {
  if (c.blockSize < 64 || c.blockSize % 64) return "blockSize must be a positive multiple of 64";
  if (!(c.clip >= 0)) return "clip must be >= 0 (0 turns clipping off)";
  if (c.errorFeedback != 0 && c.errorFeedback != 1) return "errorFeedback must be 0 or 1";
  return nullptr;
}

int flowClassOf(int level, int flowClasses) {
  if (flowClasses == 3) {  // DESIGN.md: levels 0-1, 2-5, 6-7
    static const int three[8] = {0, 0, 1, 1, 1, 1, 2, 2};
    return three[level];
  }
  return level * flowClasses / TERN_PRIORITY_LEVELS;
}

ternResult_t checkFlowConfig(const Config& cfg, const char* where) {
  if (cfg.flowClasses < 1 || cfg.flowClasses > TERN_PRIORITY_LEVELS)
    return setError(ternInvalidArgument, std::string(where) + ": flow classes " +
                                             std::to_string(cfg.flowClasses) + " is not in 1..8");
  for (int i = 0; i < cfg.flowClasses; ++i)
    if (cfg.dscp[i] < 0 || cfg.dscp[i] > 63)
      return setError(ternInvalidArgument, std::string(where) + ": DSCP " +
                                               std::to_string(cfg.dscp[i]) + " of flow class " +
                                               std::to_string(i) + " is not in 0..63");
  return ternSuccess;
}

ternResult_t resolveConfig(const ternConfig_t* user, int nranks, Config* cfg) {
  size_t q = ternaryFifoQuantum(nranks);
  cfg->fifoBytes = (cfg->fifoBytes + q - 1) / q * q;
  cfg->ternary = ternaryConfigFromEnv();
  if (const char* why = ternaryConfigProblem(cfg->ternary))
    return setError(ternInvalidArgument, std::string("TERN_TERNARY_*: ") + why);
  if (!user) return checkFlowConfig(*cfg, "TERN_FLOW_CLASSES/TERN_FLOW_DSCP");
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
  if (u.flowClasses != TERN_CONFIG_UNDEF_INT) cfg->flowClasses = u.flowClasses;
  for (int i = 0; i < TERN_PRIORITY_LEVELS; ++i)
    if (u.trafficClass[i] != TERN_CONFIG_UNDEF_INT) cfg->dscp[i] = u.trafficClass[i];
  TERN_CHECK(checkFlowConfig(*cfg, "ternCommInitRankConfig"));
  if (u.ternarySet) {
    ternTernaryConfig_t t{u.ternary.seed, u.ternary.blockSize, u.ternary.clip,
                          u.ternary.errorFeedback, u.ternary.minBytes};
    if (const char* why = ternaryConfigProblem(t)) return bad(std::string("config->ternary: ") + why);
    cfg->ternary = t;
  }
  return ternSuccess;
}

}  // namespace tern
