// The ternary-compressed allreduce: per-communicator options, state and
// statistics, and the fifo size every ternary width divides.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "tern/tern.h"

namespace tern {

struct TernaryState {
  ternTernaryConfig_t cfg;
  uint64_t calls = 0;                 // ternary calls so far: the Philox call index
  ternTernaryStats_t stats{};
  std::vector<float> maxAbs, sumSq;   // per-block scratch, grown, never shrunk
  std::vector<float> corrected;       // error feedback: g + residual
  std::map<const void*, std::vector<float>> residuals;  // per tensor handle
};

// Defaults, overridden by TERN_TERNARY_SEED / _BLOCK / _CLIP / _EF / _MIN_BYTES.
ternTernaryConfig_t ternaryConfigFromEnv();
// nullptr when valid, else why not.
const char* ternaryConfigProblem(const ternTernaryConfig_t& cfg);

// Fifo capacities are rounded to a multiple of this so that no header, element
// or group of any width used with `nranks` ranks straddles the wrap point.
size_t ternaryFifoQuantum(int nranks);

}  // namespace tern
