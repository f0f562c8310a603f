// reduce_perf: ternReduce to -r root, busbw = algbw.
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

static size_t check(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int root,
                    int rank, int nranks) {
  if (rank != root) return 0;
  size_t wrong = 0;
  for (size_t i = 0; i < s.count; ++i) {
    double want = expectedReduction(dt, op, nranks, [&](int r) { return inputValue(r, i, dt, op); });
    wrong += load(dt, recv, i) != want;
  }
  return wrong;
}

int main(int argc, char** argv) {
  CollTest t{"reduce", true, true, sizes, [](int) { return 1.0; },
             [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op,
                int root) { return ternReduce(s, r, c, dt, op, root, b.tern(), nullptr) == 0; },
             fill, check};
  return perfMain(argc, argv, t);
}
