// The all_reduce test (busbw = algbw * 2(n-1)/n), run by all_reduce_perf over
// tern and by the peer benchmarks over MPI and Gloo.
#include "common.h"
#include "values.h"

using namespace ternperf;

namespace ternperf {

Sizes sameCountSizes(size_t bytes, size_t esz, int, int) {
  size_t n = bytes / esz;
  return {n, n, n, 0, 0};
}

void fillRankValues(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int, int rank,
                    int) {
  for (size_t i = 0; i < s.count; ++i) store(dt, send, i, inputValue(rank, i, dt, op));
}

size_t countWrongReduction(const void* recv, size_t count, ternDataType_t dt, ternRedOp_t op,
                           int nranks) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = expectedReduction(dt, op, nranks, [&](int r) { return inputValue(r, i, dt, op); });
    wrong += load(dt, recv, i) != want;
  }
  return wrong;
}

namespace {

// The same -1, 0 or 1 on every rank: every sum the ternary allreduce codes
// (a rank's value in the flat ring, a host's sum in the two-level form) is
// 0 or its block's maximum, which the codes carry exactly, so the result can
// be checked exactly in both forms.
double ternaryInput(int, size_t i) { return static_cast<double>((i * 7) % 3) - 1.0; }

const CollTest kAllReduceTernaryTest{
    "all_reduce_ternary", true, false, sameCountSizes, [](int n) { return 2.0 * (n - 1) / n; },
    [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op, int) {
      return ternAllReduceTernary(s, r, c, dt, op, b.tern(), nullptr) == ternSuccess;
    },
    [](void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t, int, int rank, int) {
      for (size_t i = 0; i < s.count; ++i) store(dt, send, i, ternaryInput(rank, i));
    },
    [](const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int, int, int n) {
      size_t wrong = 0;
      for (size_t i = 0; i < s.count; ++i)
        wrong += load(dt, recv, i) !=
                 expectedReduction(dt, op, n, [&](int r) { return ternaryInput(r, i); });
      return wrong;
    }};

}  // namespace

const CollTest kAllReduceTest{
    "all_reduce", true, false, sameCountSizes, [](int n) { return 2.0 * (n - 1) / n; },
    [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op, int) {
      return b.allReduce(s, r, c, dt, op);
    },
    fillRankValues,
    [](const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int, int, int n) {
      return countWrongReduction(recv, s.count, dt, op, n);
    },
    &kAllReduceTernaryTest};
}  // namespace ternperf
