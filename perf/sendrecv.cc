// sendrecv_perf: every rank sends to rank+1 and receives from rank-1 in one
// group (a ring shift), busbw = algbw.
#include "common.h"
#include "values.h"

using namespace ternperf;

static size_t check(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t, int,
                    int rank, int nranks) {
  int from = (rank + nranks - 1) % nranks;
  size_t wrong = 0;
  char tmp[8];
  for (size_t i = 0; i < s.count; ++i) {
    store(dt, tmp, 0, inputValue(from, i, dt, ternSum));
    wrong += load(dt, recv, i) != load(dt, tmp, 0);
  }
  return wrong;
}

static bool run(Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t,
                int) {
  ternComm_t comm = b.tern();
  int rank, n;
  ternCommUserRank(comm, &rank);
  ternCommCount(comm, &n);
  ternGroupStart();
  ternResult_t a = ternSend(s, c, dt, (rank + 1) % n, comm, nullptr);
  ternResult_t rv = ternRecv(r, c, dt, (rank + n - 1) % n, comm, nullptr);
  ternResult_t e = ternGroupEnd();
  return a == ternSuccess && rv == ternSuccess && e == ternSuccess;
}

int main(int argc, char** argv) {
  CollTest t{"sendrecv", false, false, sameCountSizes, [](int) { return 1.0; }, run, fillRankValues, check};
  return perfMain(argc, argv, t);
}
