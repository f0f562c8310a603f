// The order of one pipeline stage's operations in the kFkB schedule
// (docs/DESIGN.md, "kFkB pipeline planner"): the one definition that both
// simulations (schedule.cc, shared_cores.cc) and, through tern_plan.h's
// ternPlanKfkbOrder, the Python pipeline runtime follow, so the schedule a
// stage runs is the one the planner simulated.
//
// m micro-batches form ceil(m / K) groups of K (the last one shorter when K
// does not divide m).  Stage s of p first runs min(groups, p - s) forward
// groups to fill the pipeline, then one backward group and one forward group
// in turn while forwards remain, then the remaining backward groups: at most
// min(m, K (p - s)) micro-batches are in flight at stage s (the memory rule).
// K = 1 is 1F1B, K = m is GPipe.  Forwards and backwards each run in
// ascending micro-batch order, which also fixes the order gradients are
// accumulated in (why a flushing pipeline can equal single-process training
// bitwise).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tern::planner {

struct GroupOp {
  bool forward;
  int64_t group;  // micro-batches [group K, min((group + 1) K, m))
};

// One stage's group operations, 2 * groups of them, each computed on demand:
// the dedicated simulation walks it per operation in its hot loop, so it
// holds no list.
class KfkbStage {
 public:
  KfkbStage(int64_t groups, int stages, int stage)
      : groups_(groups), warmup_(std::min<int64_t>(groups, stages - stage)) {}

  int64_t size() const { return 2 * groups_; }

  // Operation j (0 <= j < size()): the warm-up forwards, then backward g and
  // forward warmup + g alternating, then the backwards left.
  GroupOp operator[](int64_t j) const {
    if (j < warmup_) return {true, j};
    const int64_t t = j - warmup_, alternating = 2 * (groups_ - warmup_);
    if (t < alternating) {
      const bool forward = t % 2 == 1;
      return {forward, forward ? warmup_ + t / 2 : t / 2};
    }
    return {false, t - (groups_ - warmup_)};
  }

 private:
  int64_t groups_, warmup_;
};

struct KfkbOp {
  bool forward;
  int64_t micro;
};

// Stage `stage`'s operations one micro-batch at a time.  Preconditions:
// 1 <= k <= m, 0 <= stage < stages.
std::vector<KfkbOp> kfkbOrder(int64_t m, int64_t k, int stages, int stage);

}  // namespace tern::planner
