// The allgather, reduce_scatter, broadcast, reduce and sendrecv tests, run by
// tern's *_perf binaries and by the peers' (perf/peers/) for perf/compare's
// side-by-side tables.  Sizes and bus bandwidth factors as nccl-tests.
#include <cstring>
#include <initializer_list>

#include "common.h"
#include "values.h"

namespace ternperf {
namespace {

// The value rank `r` contributes at element i, as `dt` stores it.
double stored(ternDataType_t dt, int r, size_t i) {
  char tmp[8];
  store(dt, tmp, 0, inputValue(r, i, dt, ternSum));
  return load(dt, tmp, 0);
}

// allgather: size = total gathered bytes.  In place: sendbuff = recvbuff + rank * count.
Sizes gatheredSizes(size_t bytes, size_t esz, int nranks, int rank) {
  size_t c = bytes / esz / nranks;
  return {c, c * nranks, c, c * rank, 0};
}

size_t checkGathered(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t, int, int,
                     int nranks) {
  size_t wrong = 0;
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < s.count; ++i) wrong += load(dt, recv, r * s.count + i) != stored(dt, r, i);
  return wrong;
}

// reduce_scatter: size = total send bytes.  In place: recvbuff = sendbuff + rank * count.
Sizes scatteredSizes(size_t bytes, size_t esz, int nranks, int rank) {
  size_t c = bytes / esz / nranks;
  return {c * nranks, c * nranks, c, 0, c * rank};
}

void fillAllBlocks(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int, int rank,
                   int nranks) {
  for (size_t i = 0; i < s.count * nranks; ++i) store(dt, send, i, inputValue(rank, i, dt, op));
}

size_t checkScattered(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int,
                      int rank, int nranks) {
  size_t wrong = 0;
  for (size_t i = 0; i < s.count; ++i) {
    size_t g = rank * s.count + i;
    double want = expectedReduction(dt, op, nranks, [&](int r) { return inputValue(r, g, dt, op); });
    wrong += load(dt, recv, i) != want;
  }
  return wrong;
}

void fillRoot(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t, int root, int rank, int) {
  if (rank == root)
    for (size_t i = 0; i < s.count; ++i) store(dt, send, i, inputValue(root, i, dt, ternSum));
}

size_t checkFromRoot(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t, int root,
                     int, int) {
  size_t wrong = 0;
  for (size_t i = 0; i < s.count; ++i) wrong += load(dt, recv, i) != stored(dt, root, i);
  return wrong;
}

size_t checkReducedAtRoot(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op,
                          int root, int rank, int nranks) {
  return rank == root ? countWrongReduction(recv, s.count, dt, op, nranks) : 0;
}

size_t checkFromLeft(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t, int,
                     int rank, int nranks) {
  int from = (rank + nranks - 1) % nranks;
  size_t wrong = 0;
  for (size_t i = 0; i < s.count; ++i) wrong += load(dt, recv, i) != stored(dt, from, i);
  return wrong;
}

double partFactor(int n) { return static_cast<double>(n - 1) / n; }
double oneFactor(int) { return 1.0; }

}  // namespace

const CollTest kAllGatherTest{
    "all_gather", false, false, gatheredSizes, partFactor,
    [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t, int) {
      return b.allGather(s, r, c, dt);
    },
    [](void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t, int, int rank, int) {
      for (size_t i = 0; i < s.count; ++i) store(dt, send, i, inputValue(rank, i, dt, ternSum));
    },
    checkGathered};

const CollTest kReduceScatterTest{
    "reduce_scatter", true, false, scatteredSizes, partFactor,
    [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op, int) {
      return b.reduceScatter(s, r, c, dt, op);
    },
    fillAllBlocks, checkScattered};

const CollTest kBroadcastTest{
    "broadcast", false, true, sameCountSizes, oneFactor,
    [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t, int root) {
      return b.broadcast(s, r, c, dt, root);
    },
    fillRoot, checkFromRoot};

const CollTest kReduceTest{
    "reduce", true, true, sameCountSizes, oneFactor,
    [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t op, int root) {
      return b.reduce(s, r, c, dt, op, root);
    },
    fillRankValues, checkReducedAtRoot};

// Every rank sends to rank+1 and receives from rank-1 at once (a ring shift).
const CollTest kSendRecvTest{
    "sendrecv", false, false, sameCountSizes, oneFactor,
    [](Backend& b, const void* s, void* r, size_t c, ternDataType_t dt, ternRedOp_t, int) {
      return b.sendRecv(s, r, c, dt);
    },
    fillRankValues, checkFromLeft};

const CollTest* collTestByName(const char* name) {
  for (const CollTest* t : {&kAllReduceTest, &kAllGatherTest, &kReduceScatterTest, &kBroadcastTest,
                            &kReduceTest, &kSendRecvTest, &kAllToAllTest, &kGatherTest,
                            &kScatterTest})
    if (!strcmp(t->name, name)) return t;
  return nullptr;
}

}  // namespace ternperf
