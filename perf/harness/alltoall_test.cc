// The alltoall, gather and scatter tests (alltoall_perf, gather_perf,
// scatter_perf, and the peers' binaries for the side-by-side rows):
// size = the bytes of all blocks of one rank (count x nranks x element),
// busbw = algbw x (n-1)/n as nccl-tests.
// In place: all-to-all on one buffer; gather: the root's block already in
// recvbuff; scatter: the root's recvbuff inside its sendbuff.
#include "common.h"
#include "values.h"

namespace ternperf {
namespace {

enum Kind { AllToAll = 0, Gather = 1, Scatter = 2 };

// Value of element i of the block rank `from` sends to rank `to`.
void put(ternDataType_t dt, void* buf, size_t at, int from, int to, size_t i) {
  store(dt, buf, at, inputValue(from * 64 + to, i, dt, ternSum));
}

template <Kind kKind>
Sizes sizes(size_t bytes, size_t esz, int n, int rank) {
  size_t c = bytes / esz / n;
  if (kKind == AllToAll) return {c * n, c * n, c, 0, 0};
  if (kKind == Gather) return {c, c * n, c, c * rank, 0};
  return {c * n, c, c, 0, c * rank};  // scatter: recvbuff inside sendbuff in place
}

template <Kind kKind>
void fill(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t, int root, int rank, int n) {
  if (kKind == Gather) {
    for (size_t i = 0; i < s.count; ++i) put(dt, send, i, rank, root, i);
    return;
  }
  if (kKind == Scatter && rank != root) return;
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < s.count; ++i) put(dt, send, j * s.count + i, rank, j, i);
}

template <Kind kKind>
size_t check(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t, int root, int rank,
             int n) {
  size_t wrong = 0;
  char tmp[8];
  auto expect = [&](size_t at, int from, int to, size_t i) {
    put(dt, tmp, 0, from, to, i);
    wrong += load(dt, recv, at) != load(dt, tmp, 0);
  };
  if (kKind == Scatter) {
    for (size_t i = 0; i < s.count; ++i) expect(i, root, rank, i);
  } else if (kKind == AllToAll || rank == root) {
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < s.count; ++i)
        expect(j * s.count + i, j, kKind == AllToAll ? rank : root, i);
  }
  return wrong;
}

template <Kind kKind>
bool run(Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t, int root) {
  if (kKind == AllToAll) return b.allToAll(s, r, c, dt);
  if (kKind == Gather) return b.gather(s, r, c, dt, root);
  return b.scatter(s, r, c, dt, root);
}

double busFactor(int n) { return static_cast<double>(n - 1) / n; }

template <Kind k>
CollTest make(const char* name) {
  return {name, false, k != AllToAll, sizes<k>, busFactor, run<k>, fill<k>, check<k>};
}

}  // namespace

const CollTest kAllToAllTest = make<AllToAll>("alltoall");
const CollTest kGatherTest = make<Gather>("gather");
const CollTest kScatterTest = make<Scatter>("scatter");

}  // namespace ternperf
