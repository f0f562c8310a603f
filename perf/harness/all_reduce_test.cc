// The all_reduce test (busbw = algbw * 2(n-1)/n), run by all_reduce_perf over
// tern and by the peer benchmarks over MPI and Gloo.
#include "common.h"
#include "values.h"

using namespace ternperf;

static Sizes sizes(size_t bytes, size_t esz, int, int) {
  size_t n = bytes / esz;
  return {n, n, n, 0, 0};
}

static void fill(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int, int rank, int) {
  for (size_t i = 0; i < s.count; ++i) store(dt, send, i, inputValue(rank, i, dt, op));
}

static size_t check(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int,
                    int, int nranks) {
  size_t wrong = 0;
  for (size_t i = 0; i < s.count; ++i) {
    double want = expectedReduction(dt, op, nranks, [&](int r) { return inputValue(r, i, dt, op); });
    wrong += load(dt, recv, i) != want;
  }
  return wrong;
}

namespace ternperf {
const CollTest kAllReduceTest{
    "all_reduce", true, false, sizes, [](int n) { return 2.0 * (n - 1) / n; },
    [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op, int) {
      return b.allReduce(s, r, c, dt, op);
    },
    fill, check};
}  // namespace ternperf
