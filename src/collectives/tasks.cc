// Tasks of the dense collectives, the barrier and point-to-point transfers:
// one phase of programs (an allgather in two levels over large blocks:
// several, allgather_twolevel.cc), then any local work that belongs after it.
#include <typeinfo>
#include <vector>

#include "base/dtype.h"
#include "collectives/collectives.h"
#include "memory/scratch_pool.h"

namespace tern {

namespace {

// All-to-all's input goes aside first when the buffers overlap, unless the
// blocks are small and exactly in place (planAllToAll: every send leaves
// before the first receive writes).
bool allToAllStages(const PlanCtx& x, const CollArgs& a) {
  const size_t blockBytes = a.count * typeSize(a.dt), total = blockBytes * x.nranks;
  const char *s = static_cast<const char*>(a.src), *d = static_cast<const char*>(a.dst);
  return s < d + total && d < s + total && !(s == d && allToAllFitsFifos(x, blockBytes));
}

class DenseTask final : public Task {
 public:
  explicit DenseTask(const CollArgs& a) : a_(a) {}
  ~DenseTask() override { stagingPool().giveBack(std::move(staged_)); }
  void bindPeer(int peer) override { a_.root = peer; }
  // Kept with its operation in the pool; makeTask sets it up again.  The
  // all-to-all staging copy (as large as the buffers) goes back to the
  // staging pool, not with the task.
  bool recycle() override {
    stagingPool().giveBack(std::move(staged_));
    staged_ = std::vector<char>();
    return true;
  }

  ternResult_t next(const PlanCtx& x, Phase* ph, bool* more) override {
    if (stage_ == 0 && a_.kind == OpKind::AllGather) phases_ = allGatherPhases(x, a_.count * typeSize(a_.dt));
    *more = stage_ < phases_;
    if (*more) {
      plan(x, ph, stage_++);
      return ternSuccess;
    }
    // After the programs: recursive doubling leaves the average's division.
    if (a_.kind == OpKind::AllReduce && allReduceNeedsDivide(x, a_.count, a_.dt, a_.op))
      x.mem->divide(a_.dst, a_.count, a_.dt, x.nranks);
    return ternSuccess;
  }

 private:
  void plan(const PlanCtx& x, Phase* ph, int phase) {
    switch (a_.kind) {
      case OpKind::Barrier:  // a one-integer allreduce: nobody leaves before all arrived
        ph->what = "barrier";
        if (x.nranks > 1) planAllReduceRecursiveDoubling(x, &token_, &token_, 1, ternInt32, ternMax, ph);
        return;
      case OpKind::AllToAll: {
        const size_t blockBytes = a_.count * typeSize(a_.dt);
        return planAllToAll(x, stagedIfOverlapping(x, blockBytes), a_.dst, blockBytes, ph);
      }
      case OpKind::Ternary:
        return;  // not dense (allreduce_ternary.cc)
      case OpKind::AllGather:  // one phase, or two levels in pieces
        return planAllGather(x, a_.src, a_.dst, a_.count * typeSize(a_.dt), ph, phase);
      default:
        planPure(a_, x, ph);
    }
  }

  // All-to-all sends blocks while others arrive: when the buffers overlap
  // (in place), the send blocks are copied aside first, into scratch kept
  // between calls; unless the blocks are small and exactly in place (every
  // send leaves before the first receive writes: planAllToAll).
  const void* stagedIfOverlapping(const PlanCtx& x, size_t blockBytes) {
    if (!allToAllStages(x, a_)) return a_.src;
    const size_t total = blockBytes * x.nranks;
    staged_ = stagingPool().borrow(total);
    x.mem->copy(staged_.data(), a_.src, total);
    return staged_.data();
  }
  static ScratchPool<char>& stagingPool() {
    static auto* pool = new ScratchPool<char>(2);  // never destroyed: tasks may outlive exit()
    return *pool;
  }

  CollArgs a_;
  std::vector<char> staged_;
  int stage_ = 0, phases_ = 1;
  int token_ = 0;
};

}  // namespace

bool plansPurely(const CollArgs& a, const PlanCtx& x) {
  switch (a.kind) {
    case OpKind::AllReduce:  // copies its input into its output first
    case OpKind::Barrier:    // its task holds the token
    case OpKind::Ternary:
      return false;
    case OpKind::AllToAll:
      return !allToAllStages(x, a);
    case OpKind::AllGather:
      return allGatherPhases(x, a.count * typeSize(a.dt)) == 1;
    default:
      return true;
  }
}

Step p2pStep(const CollArgs& a, Conn* peer) {
  const size_t bytes = a.count * typeSize(a.dt);
  Step s = a.kind == OpKind::Send ? Step{nullptr, peer, static_cast<const char*>(a.src), nullptr, bytes}
                                  : Step{peer, nullptr, nullptr, static_cast<char*>(a.dst), bytes};
  s.direct = true;
  return s;
}

void planPure(const CollArgs& a, const PlanCtx& x, Phase* ph) {
  const size_t bytes = a.count * typeSize(a.dt);
  switch (a.kind) {
    case OpKind::AllReduce: return planAllReduce(x, a.src, a.dst, a.count, a.dt, a.op, ph);
    case OpKind::Broadcast: return planBroadcast(x, a.src, a.dst, bytes, a.root, ph);
    case OpKind::Reduce: return planReduce(x, a.src, a.dst, a.count, a.dt, a.op, a.root, ph);
    case OpKind::AllGather: return planAllGather(x, a.src, a.dst, bytes, ph);
    case OpKind::ReduceScatter: return planReduceScatter(x, a.src, a.dst, a.count, a.dt, a.op, ph);
    case OpKind::Send:
    case OpKind::Recv: {
      ph->what = "send/recv";
      ph->progs.resize(1);
      ph->progs[0].add(p2pStep(a, x.conn(a.root)));
      return;
    }
    case OpKind::AllToAll: return planAllToAll(x, a.src, a.dst, bytes, ph);
    case OpKind::Gather: return planGather(x, a.src, a.dst, bytes, a.root, ph);
    case OpKind::Scatter: return planScatter(x, a.src, a.dst, bytes, a.root, ph);
    case OpKind::Barrier:
    case OpKind::Ternary:
      return;  // planned by their tasks
  }
}

std::unique_ptr<Task> makeTask(const CollArgs& a, std::unique_ptr<Task> reuse) {
  // Equal typeids compare as one pointer comparison (a dynamic_cast walks
  // the class hierarchy: ~1.5% of an 8-byte allreduce's profile).
  if (reuse && typeid(*reuse) == typeid(DenseTask)) {
    *static_cast<DenseTask*>(reuse.get()) = DenseTask(a);  // a new task's state, in place
    return reuse;
  }
  return std::make_unique<DenseTask>(a);
}

}  // namespace tern
