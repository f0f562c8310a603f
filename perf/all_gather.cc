// all_gather_perf: ternAllGather, size = total gathered bytes,
// busbw = algbw * (n-1)/n.  In place: sendbuff = recvbuff + rank * count.
#include "common.h"
#include "values.h"

using namespace ternperf;

static Sizes sizes(size_t bytes, size_t esz, int nranks, int rank) {
  size_t c = bytes / esz / nranks;
  return {c, c * nranks, c, c * rank, 0};
}

static void fill(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t, int, int rank, int) {
  for (size_t i = 0; i < s.count; ++i) store(dt, send, i, inputValue(rank, i, dt, ternSum));
}

static size_t check(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t, int, int,
                    int nranks) {
  size_t wrong = 0;
  char tmp[8];
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < s.count; ++i) {
      store(dt, tmp, 0, inputValue(r, i, dt, ternSum));
      wrong += load(dt, recv, r * s.count + i) != load(dt, tmp, 0);
    }
  return wrong;
}

int main(int argc, char** argv) {
  CollTest t{"all_gather", false, false, sizes,
             [](int n) { return static_cast<double>(n - 1) / n; },
             [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t, int) {
               return ternAllGather(s, r, c, dt, b.tern(), nullptr) == ternSuccess;
             },
             fill, check};
  return perfMain(argc, argv, t);
}
