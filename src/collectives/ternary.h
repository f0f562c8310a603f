// The ternary-compressed allreduce: per-communicator options, state and
// statistics.  The state is shared by concurrent operations (and read by
// stats calls on other threads): everything in it is guarded by `mu`.  Its
// owner is the communicator's Attachments (base/attachments.h); the options
// it starts from are resolved with the rest of the config (comm/config.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "base/attachments.h"
#include "collectives/collectives.h"
#include "memory/memory.h"
#include "tern/tern.h"

namespace tern {

// One tensor's error feedback residual: `count` floats in the memory its
// calls' buffers live in (host, or the device's: MemOps::persistentZeros),
// zero at first.  Only the fused encode reads and writes it (one pass with
// the codes: TernaryInput::residual).  A call of another size or memory type
// starts it over from zero.
struct TernaryResidual {
  std::shared_ptr<float> data;
  size_t count = 0;
  MemType type = MemType::Host;
};

struct TernaryState {
  std::mutex mu;
  ternTernaryConfig_t cfg;
  uint64_t callsAtLevel[TERN_PRIORITY_LEVELS] = {};  // compressed calls: the Philox call index
  ternTernaryStats_t stats{};
  // Error feedback residuals per tensor handle; a running call holds its own
  // reference, so releasing a handle never pulls memory from under it.
  std::map<const void*, std::shared_ptr<TernaryResidual>> residuals;

  void record(size_t elements, uint64_t payload, uint64_t wire, uint64_t dense);
  void countFallback();
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
  std::shared_ptr<TernaryResidual> residual;  // error feedback on
};

// The state attached to `owner` (a communicator's Attachments), made with
// the options `initial` on first use.
TernaryState& ternaryState(Attachments& owner, const ternTernaryConfig_t& initial);

// The task of one ternary allreduce (dense when compression does not pay).
std::unique_ptr<Task> makeTernaryTask(TernaryState& st, const CollArgs& a, const void* handle,
                                      int nranks, int level);

}  // namespace tern
