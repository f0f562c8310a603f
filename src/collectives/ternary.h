// The ternary-compressed allreduce: per-communicator options, state and
// statistics, and the fifo size every ternary width divides.  The state is
// shared by concurrent operations (and read by stats calls on other
// threads): everything in it is guarded by `mu`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/collectives.h"
#include "memory/scratch_pool.h"
#include "tern/tern.h"

namespace tern {

struct TernaryState {
  std::mutex mu;
  ternTernaryConfig_t cfg;
  uint64_t callsAtLevel[TERN_PRIORITY_LEVELS] = {};  // compressed calls: the Philox call index
  ternTernaryStats_t stats{};
  // Error feedback residuals per tensor handle; a running call holds its own
  // reference, so releasing a handle never pulls memory from under it.
  std::map<const void*, std::shared_ptr<std::vector<float>>> residuals;
  ScratchPool<float> scratch;  // for g + residual, reused (its own lock)

  void record(size_t elements, uint64_t payload, uint64_t wire, uint64_t dense);
};

// One call, as fixed when it was issued.
struct TernaryCall {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t count = 0;
  ternDataType_t dt = ternFloat32;
  ternRedOp_t op = ternSum;
  ternTernaryConfig_t cfg{};
  uint64_t index = 0;
  std::shared_ptr<std::vector<float>> residual;  // error feedback on
};

// Defaults, overridden by TERN_TERNARY_SEED / _BLOCK / _CLIP / _EF / _MIN_BYTES.
ternTernaryConfig_t ternaryConfigFromEnv();
// nullptr when valid, else why not.
const char* ternaryConfigProblem(const ternTernaryConfig_t& cfg);

// Fifo capacities are rounded to a multiple of this so that no header, element
// or group of any width used with `nranks` ranks straddles the wrap point.
size_t ternaryFifoQuantum(int nranks);

// The task of one ternary allreduce (dense when compression does not pay).
std::unique_ptr<Task> makeTernaryTask(TernaryState& st, const CollArgs& a, const void* handle,
                                      int nranks, int level);

}  // namespace tern
