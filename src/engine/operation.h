// An Operation is data: what was asked (kind, buffers, count, datatype, op,
// root/peer, priority level), how it is carried out (a Task that plans it
// phase by phase as Programs of Steps), how far it got, and how it ended
// (result and sentence).  The API builds one and hands it to its
// communicator's executor, which owns its progress until it completes; a
// request or a blocking caller waits on it.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/socket.h"
#include "engine/program.h"

namespace tern {

enum class OpKind : uint8_t {
  AllReduce = 1, Broadcast, Reduce, AllGather, ReduceScatter, Barrier, Ternary, Send, Recv,
  AllToAll, Gather, Scatter
};
const char* opKindName(OpKind k);

// What every rank's copy of an operation must agree on.  It travels once per
// stream an operation uses, ahead of the first byte of payload, so ranks that
// called different operations find out before they mix up their data.
struct OpDesc {
  uint32_t magic = 0;
  OpKind kind = OpKind::AllReduce;
  uint8_t dtype = 0, redop = 0, level = 0;
  int32_t root = -1;   // root; send: destination; recv: source; else -1
  int32_t rank = -1;   // who sent this descriptor
  uint64_t count = 0;  // elements (allgather / reduce-scatter: per rank)
  uint64_t seq = 0;    // collectives: index at this level; p2p: index per peer, direction, level
};
static_assert(sizeof(OpDesc) == 32, "the descriptor is 32 bytes on the wire");
constexpr uint32_t kDescMagic = 0x4f4e5254;  // "TRNO"

// "allreduce of 1048576 float32 (sum) at level 4, #3"
std::string describe(const OpDesc& d);
// Empty when `theirs` (received from a peer) matches `mine`, else the sentence
// naming both sides.
std::string descMismatch(const OpDesc& mine, const OpDesc& theirs);

// How an operation is carried out: next() fills the phase to run now (doing
// any local work that belongs before it) and sets *more; when it sets *more to
// false the operation is complete (after that call's local work).  Called on
// the executor's thread, first when the operation may start, then each time
// the previous phase's programs have finished.
class Task {
 public:
  virtual ~Task() = default;
  virtual ternResult_t next(const PlanCtx& ctx, Phase* ph, bool* more) = 0;
  // A receive from any source learns its peer before its first next().
  virtual void bindPeer(int /*peer*/) {}
};

struct Operation {
  OpDesc desc;
  int level = 4;
  bool collective = true;   // a collective waits for every earlier operation of its level
  int peer = -1;            // p2p: the other rank (a receive from any source: -1 until bound)
  bool send = false;        // p2p: direction
  int* anySource = nullptr; // ternRecvAny: where the bound peer is reported
  unsigned anySourceTurn = 0;  // which peer an unbound receive looks at first
  PlanCtx ctx;
  std::unique_ptr<Task> task;

  // Executor state (its thread only).
  Phase phase;
  bool begun = false;
  bool greetedNeighbours = false;
  std::vector<Conn*> pumps;                    // connections the phase must pump
  std::vector<const Conn*> greetedIn, greetedOut;  // streams the descriptor went over
  bool greetedInFrom(const Conn* c) const { return has(greetedIn, c); }
  bool greetedOutTo(const Conn* c) const { return has(greetedOut, c); }
  Clock::time_point idleSince{};

  // Completion, read by any thread.
  std::atomic<bool> done{false};
  ternResult_t result = ternSuccess;
  std::string error;

 private:
  static bool has(const std::vector<const Conn*>& v, const Conn* c) {
    return std::find(v.begin(), v.end(), c) != v.end();
  }
};

using OpPtr = std::shared_ptr<Operation>;

}  // namespace tern
