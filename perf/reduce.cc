// reduce_perf: ternReduce to -r root, busbw = algbw.
#include "common.h"
#include "values.h"

using namespace ternperf;

static size_t check(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int root,
                    int rank, int nranks) {
  return rank == root ? countWrongReduction(recv, s.count, dt, op, nranks) : 0;
}

int main(int argc, char** argv) {
  CollTest t{"reduce", true, true, sameCountSizes, [](int) { return 1.0; },
             [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op,
                int root) { return ternReduce(s, r, c, dt, op, root, b.tern(), nullptr) == 0; },
             fillRankValues, check};
  return perfMain(argc, argv, t);
}
