// Every collective, over real processes, parameterised over transport x
// ranks; inside each run: sizes (0, 1, odd, chunk edges, many pieces, large)
// x all ten datatypes x all five ops (over UCX one type per width and two:
// checker.h narrowSweep) x in/out of place, every root.
// One communicator uses tiny chunks and fifos so that chunk edges and fifo
// wrap-around happen at small sizes; one uses the defaults for large sizes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "checker.h"
#include "harness.h"
#include "values.h"

using namespace terntest;
using namespace ternperf;

namespace {

constexpr size_t kSmallChunk = 4096;

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
  for (ternDataType_t dt : sweptTypes()) {
    for (size_t count : smallSizes(ternTypeSize(dt), ctx.nranks))
      for (bool inplace : {false, true}) {
        for (ternRedOp_t op : sweptOps()) {
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
  // Odd, several default-size (512 KiB) ring pieces; under the sanitizers,
  // which check every byte a copy or a reduction touches, a quarter (still
  // 3 pieces of float32 and 6 of int64): the full size was most of
  // ThreadSanitizer's time in these suites (2026-12-05).
  const size_t large = kUnderSanitizer ? 375001 : 1500007;
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

// The checker's tables (one period of inputs and of expected results) equal
// the values computed element by element, for every datatype, op and seed.
TEST(ValueTables, EqualTheValuesPerElement) {
  for (int t = 0; t < ternNumTypes; ++t)
    for (int o = 0; o < ternNumOps; ++o)
      for (uint64_t seed : {0, 1, 5, 87, 1500007}) {
        auto dt = static_cast<ternDataType_t>(t);
        auto op = static_cast<ternRedOp_t>(o);
        ValueTable in = inputTable(2, dt, op, seed), sum = reductionTable(3, dt, op, seed);
        for (size_t i = 0; i < 3 * kValuePeriod + 5; ++i) {
          ASSERT_EQ(in.at(i), inputValue(2, i, dt, op, seed)) << typeName(dt) << opName(op) << i;
          double want = expectedReduction(dt, op, 3, [&](int r) { return inputValue(r, i, dt, op, seed); });
          ASSERT_EQ(sum.at(i), want) << typeName(dt) << opName(op) << i;
        }
      }
}

class Collectives : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Over UCX the narrow sweep (checker.h narrowSweep): its full sweep at 2-4
// ranks took ~130 of the plain stage's ~1,500 test seconds (2026-12-05).
TEST_P(Collectives, AllSizesTypesOpsPlaces) {
  auto [transport, nranks] = GetParam();
  std::map<std::string, std::string> env{{"TERN_TIMEOUT", "60"}};
  if (transport.rfind("ucx", 0) == 0) env["TERNTEST_NARROW_SWEEP"] = "1";
  expectAllRanksOk(runRanks(nranks, transportEnv(transport, env), collectivesBody, 2, 600));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, Collectives,
    ::testing::Combine(::testing::ValuesIn(testTransports()), ::testing::Values(1, 2, 3, 4)),
    [](const auto& info) { return transportRanksName(info); });

// Every allreduce algorithm TERN_ALGO can force, past a tiny fifo
// (TERN_SMALL_THRESHOLD=0, so that the force holds at every size): forced
// recursive doubling on a buffer larger than the fifo once left both
// partners sending, each waiting for the other to make room.
int forcedAlgorithmsBody(RankCtx& ctx) {
  setenv("TERN_CHUNKSIZE", std::to_string(kSmallChunk).c_str(), 1);
  setenv("TERN_BUFFSIZE", "16384", 1);
  setenv("TERN_SMALL_THRESHOLD", "0", 1);
  int failures = 0, i = 0;
  for (const char* algo : {"rd", "ring", "twolevel"}) {
    setenv("TERN_ALGO", algo, 1);
    Checker c{ctx, ctx.comm(i++)};
    for (ternDataType_t dt : {ternFloat32, ternInt8, ternFloat64}) {
      const size_t fifo = 16384 / ternTypeSize(dt);
      for (size_t count : {size_t(1), size_t(1023), fifo / 4 + 1, fifo + 3, 5 * fifo + 1})
        for (bool inplace : {false, true}) {
          c.allReduce(dt, ternSum, count, inplace);
          c.allReduce(dt, ternMax, count, inplace);
        }
    }
    failures += c.failures;
  }
  for (const char* v : {"TERN_CHUNKSIZE", "TERN_BUFFSIZE", "TERN_SMALL_THRESHOLD", "TERN_ALGO"}) unsetenv(v);
  return failures ? 1 : 0;
}

class ForcedAlgorithms : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ForcedAlgorithms, EverySizePastTheFifo) {
  auto [transport, nranks] = GetParam();
  expectAllRanksOk(runRanks(nranks, transportEnv(transport, {{"TERN_TIMEOUT", "30"}}),
                            forcedAlgorithmsBody, 3, 120));
}

INSTANTIATE_TEST_SUITE_P(Transports, ForcedAlgorithms,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(2, 3)),
                         [](const auto& info) { return transportRanksName(info); });

}  // namespace
