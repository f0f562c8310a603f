// broadcast_perf: ternBroadcast from -r root, busbw = algbw.
#include "common.h"
#include "values.h"

using namespace ternperf;

static void fill(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t, int root, int rank,
                 int) {
  if (rank == root)
    for (size_t i = 0; i < s.count; ++i) store(dt, send, i, inputValue(root, i, dt, ternSum));
}

static size_t check(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t, int root,
                    int, int) {
  size_t wrong = 0;
  for (size_t i = 0; i < s.count; ++i) {
    char tmp[8];
    store(dt, tmp, 0, inputValue(root, i, dt, ternSum));
    wrong += load(dt, recv, i) != load(dt, tmp, 0);
  }
  return wrong;
}

int main(int argc, char** argv) {
  CollTest t{"broadcast", false, true, sameCountSizes, [](int) { return 1.0; },
             [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t,
                int root) { return ternBroadcast(s, r, c, dt, root, b.tern(), nullptr) == 0; },
             fill, check};
  return perfMain(argc, argv, t);
}
