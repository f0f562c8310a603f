// all_reduce_perf: ternAllReduce, busbw = algbw * 2(n-1)/n.
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

int main(int argc, char** argv) {
  CollTest t{"all_reduce", true, false, sizes,
             [](int n) { return 2.0 * (n - 1) / n; },
             [](const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op, int,
                ternComm_t comm) { return ternAllReduce(s, r, c, dt, op, comm, nullptr); },
             fill, check};
  return perfMain(argc, argv, t);
}
