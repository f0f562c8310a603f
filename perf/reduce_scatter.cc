// reduce_scatter_perf: ternReduceScatter, size = total send bytes,
// busbw = algbw * (n-1)/n.  In place: recvbuff = sendbuff + rank * count.
#include "common.h"
#include "values.h"

using namespace ternperf;

static Sizes sizes(size_t bytes, size_t esz, int nranks, int rank) {
  size_t c = bytes / esz / nranks;
  return {c * nranks, c * nranks, c, 0, c * rank};
}

static void fill(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int, int rank,
                 int nranks) {
  for (size_t i = 0; i < s.count * nranks; ++i) store(dt, send, i, inputValue(rank, i, dt, op));
}

static size_t check(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int,
                    int rank, int nranks) {
  size_t wrong = 0;
  for (size_t i = 0; i < s.count; ++i) {
    size_t g = rank * s.count + i;
    double want = expectedReduction(dt, op, nranks, [&](int r) { return inputValue(r, g, dt, op); });
    wrong += load(dt, recv, i) != want;
  }
  return wrong;
}

int main(int argc, char** argv) {
  CollTest t{"reduce_scatter", true, false, sizes,
             [](int n) { return static_cast<double>(n - 1) / n; },
             [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op,
                int) { return ternReduceScatter(s, r, c, dt, op, b.tern(), nullptr) == 0; },
             fill, check};
  return perfMain(argc, argv, t);
}
