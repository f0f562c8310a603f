#include "planner/kfkb.h"

namespace tern::planner {

std::vector<KfkbOp> kfkbOrder(int64_t m, int64_t k, int stages, int stage) {
  const KfkbStage ops((m + k - 1) / k, stages, stage);
  std::vector<KfkbOp> order;
  order.reserve(2 * static_cast<size_t>(m));
  for (int64_t j = 0; j < ops.size(); ++j) {
    const GroupOp g = ops[j];
    for (int64_t i = g.group * k; i < std::min((g.group + 1) * k, m); ++i) order.push_back({g.forward, i});
  }
  return order;
}

}  // namespace tern::planner
