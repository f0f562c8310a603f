// Every collective, over real processes, parameterised over transport x
// ranks; inside each run: sizes (0, 1, odd, chunk edges, many pieces, large)
// x all ten datatypes x all five ops x in/out of place, every root.
// One communicator uses tiny chunks and fifos so that chunk edges and fifo
// wrap-around happen at small sizes; one uses the defaults for large sizes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"
#include "values.h"

using namespace terntest;
using namespace ternperf;

namespace {

constexpr size_t kSmallChunk = 4096;

struct Checker {
  RankCtx& ctx;
  ternComm_t comm;
  int failures = 0;

  bool report(const char* coll, ternDataType_t dt, ternRedOp_t op, size_t count, bool inplace,
              int root, size_t bad, size_t firstBad, double got, double want) {
    if (bad == 0) return true;
    failf(ctx, "%s %s/%s count=%zu %s root=%d: %zu wrong, first at %zu: got %g want %g", coll,
          typeName(dt), opName(op), count, inplace ? "in-place" : "out-of-place", root, bad,
          firstBad, got, want);
    ++failures;
    return false;
  }

  bool ok(ternResult_t r, const char* coll) {
    if (r == ternSuccess) return true;
    failf(ctx, "%s returned %s: %s", coll, ternGetErrorString(r), ternGetLastError(comm));
    ++failures;
    return false;
  }

  void allReduce(ternDataType_t dt, ternRedOp_t op, size_t count, bool inplace) {
    size_t esz = ternTypeSize(dt);
    std::vector<char> send(count * esz + 1), recv(count * esz + 1);
    char* s = inplace ? recv.data() : send.data();
    for (size_t i = 0; i < count; ++i) store(dt, s, i, inputValue(ctx.rank, i, dt, op, count));
    if (!ok(ternAllReduce(s, recv.data(), count, dt, op, comm, nullptr), "ternAllReduce")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    for (size_t i = 0; i < count; ++i) {
      double w = expectedReduction(dt, op, ctx.nranks,
                                   [&](int r) { return inputValue(r, i, dt, op, count); });
      double g = load(dt, recv.data(), i);
      if (g != w && bad++ == 0) first = i, got = g, want = w;
    }
    report("allreduce", dt, op, count, inplace, -1, bad, first, got, want);
  }

  void reduce(ternDataType_t dt, ternRedOp_t op, size_t count, bool inplace, int root) {
    size_t esz = ternTypeSize(dt);
    std::vector<char> send(count * esz + 1), recv(count * esz + 1, 0x5a);
    char* s = inplace ? recv.data() : send.data();
    for (size_t i = 0; i < count; ++i) store(dt, s, i, inputValue(ctx.rank, i, dt, op, root));
    std::vector<char> before = recv;
    if (!ok(ternReduce(s, recv.data(), count, dt, op, root, comm, nullptr), "ternReduce")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    for (size_t i = 0; i < count; ++i) {
      double w = ctx.rank == root
                     ? expectedReduction(dt, op, ctx.nranks,
                                         [&](int r) { return inputValue(r, i, dt, op, root); })
                     : load(dt, before.data(), i);  // non-roots' recvbuff is untouched
      double g = load(dt, recv.data(), i);
      if (!(g == w || (std::isnan(g) && std::isnan(w))) && bad++ == 0) first = i, got = g, want = w;
    }
    report("reduce", dt, op, count, inplace, root, bad, first, got, want);
  }

  void reduceScatter(ternDataType_t dt, ternRedOp_t op, size_t count, bool inplace) {
    size_t esz = ternTypeSize(dt), n = ctx.nranks;
    std::vector<char> send(count * n * esz + 1), recvAll(count * n * esz + 1);
    char* s = inplace ? recvAll.data() : send.data();
    char* d = inplace ? recvAll.data() + ctx.rank * count * esz : recvAll.data();
    for (size_t i = 0; i < count * n; ++i) store(dt, s, i, inputValue(ctx.rank, i, dt, op));
    if (!ok(ternReduceScatter(s, d, count, dt, op, comm, nullptr), "ternReduceScatter")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    for (size_t i = 0; i < count; ++i) {
      size_t g = ctx.rank * count + i;
      double w = expectedReduction(dt, op, ctx.nranks,
                                   [&](int r) { return inputValue(r, g, dt, op); });
      double v = load(dt, d, i);
      if (v != w && bad++ == 0) first = i, got = v, want = w;
    }
    report("reduce_scatter", dt, op, count, inplace, -1, bad, first, got, want);
  }

  void allGather(ternDataType_t dt, size_t count, bool inplace) {
    size_t esz = ternTypeSize(dt), n = ctx.nranks;
    std::vector<char> send(count * esz + 1), recv(count * n * esz + 1);
    char* s = inplace ? recv.data() + ctx.rank * count * esz : send.data();
    for (size_t i = 0; i < count; ++i) store(dt, s, i, inputValue(ctx.rank, i, dt, ternSum));
    if (!ok(ternAllGather(s, recv.data(), count, dt, comm, nullptr), "ternAllGather")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    char tmp[8];
    for (size_t r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        store(dt, tmp, 0, inputValue(static_cast<int>(r), i, dt, ternSum));
        double w = load(dt, tmp, 0), g = load(dt, recv.data(), r * count + i);
        if (g != w && bad++ == 0) first = r * count + i, got = g, want = w;
      }
    report("allgather", dt, ternSum, count, inplace, -1, bad, first, got, want);
  }

  void broadcast(ternDataType_t dt, size_t count, bool inplace, int root) {
    size_t esz = ternTypeSize(dt);
    std::vector<char> send(count * esz + 1), recv(count * esz + 1);
    char* s = inplace ? recv.data() : send.data();
    if (ctx.rank == root)
      for (size_t i = 0; i < count; ++i) store(dt, s, i, inputValue(root, i, dt, ternSum));
    if (!ok(ternBroadcast(s, recv.data(), count, dt, root, comm, nullptr), "ternBroadcast")) return;
    size_t bad = 0, first = 0;
    double got = 0, want = 0;
    char tmp[8];
    for (size_t i = 0; i < count; ++i) {
      store(dt, tmp, 0, inputValue(root, i, dt, ternSum));
      double w = load(dt, tmp, 0), g = load(dt, recv.data(), i);
      if (g != w && bad++ == 0) first = i, got = g, want = w;
    }
    report("broadcast", dt, ternSum, count, inplace, root, bad, first, got, want);
  }
};

std::vector<size_t> smallSizes(size_t esz, int nranks) {
  size_t edge = kSmallChunk / esz * nranks;  // one ring piece
  return {0, 1, 7, 255, 1023, edge - 1, edge, edge + 1, 3 * edge + 5};
}

int collectivesBody(RankCtx& ctx) {
  setenv("TERN_CHUNKSIZE", std::to_string(kSmallChunk).c_str(), 1);
  setenv("TERN_BUFFSIZE", "16384", 1);
  setenv("TERN_SMALL_THRESHOLD", "1024", 1);
  ternComm_t tiny = ctx.comm(0);
  unsetenv("TERN_CHUNKSIZE");
  unsetenv("TERN_BUFFSIZE");
  unsetenv("TERN_SMALL_THRESHOLD");
  ternComm_t dflt = ctx.comm(1);

  Checker small{ctx, tiny};
  for (int t = 0; t < ternNumTypes; ++t) {
    auto dt = static_cast<ternDataType_t>(t);
    for (size_t count : smallSizes(ternTypeSize(dt), ctx.nranks))
      for (bool inplace : {false, true}) {
        for (int o = 0; o < ternNumOps; ++o) {
          auto op = static_cast<ternRedOp_t>(o);
          small.allReduce(dt, op, count, inplace);
          small.reduceScatter(dt, op, count, inplace);
          small.reduce(dt, op, count, inplace, static_cast<int>(count % ctx.nranks));
        }
        small.allGather(dt, count, inplace);
        small.broadcast(dt, count, inplace, static_cast<int>((count + 1) % ctx.nranks));
      }
  }
  for (int root = 0; root < ctx.nranks; ++root) {
    small.broadcast(ternFloat32, 5000, false, root);
    small.reduce(ternInt32, ternSum, 5000, true, root);
  }

  Checker big{ctx, dflt};
  const size_t large = 1500007;  // odd, several default-size ring pieces
  for (ternDataType_t dt : {ternFloat32, ternBfloat16, ternInt64})
    for (bool inplace : {false, true}) {
      for (ternRedOp_t op : {ternSum, ternAvg, ternMax})
        big.allReduce(dt, op, large, inplace);
      big.reduceScatter(dt, ternSum, large / ctx.nranks + 1, inplace);
      big.allGather(dt, large / ctx.nranks + 3, inplace);
      big.broadcast(dt, large, inplace, ctx.nranks - 1);
      big.reduce(dt, ternMin, large, inplace, 0);
    }
  if (ternCommDestroy(tiny) != ternSuccess || ternCommDestroy(dflt) != ternSuccess)
    return failf(ctx, "ternCommDestroy failed");
  return small.failures + big.failures ? 1 : 0;
}

class Collectives : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Collectives, AllSizesTypesOpsPlaces) {
  auto [transport, nranks] = GetParam();
  expectAllRanksOk(runRanks(nranks, transportEnv(transport, {{"TERN_TIMEOUT", "60"}}),
                         collectivesBody, 2, 600));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, Collectives,
    ::testing::Combine(::testing::ValuesIn(testTransports()), ::testing::Values(1, 2, 3, 4)),
    [](const auto& info) { return transportRanksName(info); });

}  // namespace
