// Small operations over shm (up to TERN_LL_BYTES; these runs set 24, one line)
// take the LL stream (src/transport/ll.h) instead of the fifo.  Real processes: every
// collective and send/recv right at 2-4 ranks for every datatype and op at
// counts on and around the limit, small and large operations in flight
// together (the two streams keep their order), an urgent small operation
// overtaking a bulk one, sizes on either side of the limit reported as a
// mismatch naming both calls, a dead peer and a stalled peer reported as
// errors, and a rank waiting on a stalled peer not burning a core.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "checker.h"
#include "harness.h"
#include "small_fault_cases.h"

using namespace terntest;

namespace {

// TERN_LL_BYTES of this run (each rank is a process of its own): one line
// (24, what fits beside the descriptor), or a limit of many lines with three
// datatypes.  The default is 0 (off): see docs/ENV.md.
size_t limit = 24;

// Counts whose bytes are just under, at and just over the limit, and one element.
std::vector<size_t> edgeCounts(size_t esz) {
  const size_t n = limit / esz;
  return {1, n - 1, n, n + 1};
}

// Our send to the next rank and receive from the previous one, in a group.
bool ringSendRecv(Checker& c, size_t count) {
  const int n = c.ctx.nranks, r = c.ctx.rank;
  std::vector<int32_t> out(count), in(count, -1);
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(r * 100000 + i);
  ternGroupStart();
  ternSend(out.data(), count, ternInt32, (r + 1) % n, c.comm, nullptr);
  ternRecv(in.data(), count, ternInt32, (r + n - 1) % n, c.comm, nullptr);
  if (!c.ok(ternGroupEnd(), "send/recv")) return false;
  const int from = (r + n - 1) % n;
  for (size_t i = 0; i < count; ++i)
    if (in[i] != static_cast<int32_t>(from * 100000 + i))
      return c.report("send/recv", ternInt32, ternSum, count, false, from, 1, i, in[i], from * 100000 + i);
  return true;
}

int everyCollectiveBody(RankCtx& ctx) {
  Checker c{ctx, ctx.comm()};
  for (ternDataType_t dt : sweptTypes()) {
    if (limit > 24 && dt != ternInt8 && dt != ternFloat32 && dt != ternFloat64) continue;
    for (size_t count : edgeCounts(ternTypeSize(dt)))
      for (bool inplace : {false, true}) {
        for (ternRedOp_t op : sweptOps()) {
          c.allReduce(dt, op, count, inplace);
          c.reduce(dt, op, count, inplace, static_cast<int>(count % ctx.nranks));
          c.reduceScatter(dt, op, count, inplace);
        }
        c.allGather(dt, count, inplace);
        c.broadcast(dt, count, inplace, static_cast<int>((count + 1) % ctx.nranks));
      }
  }
  for (size_t count : edgeCounts(4)) ringSendRecv(c, count);
  for (int k = 0; k < 3; ++k) c.ok(ternBarrier(c.comm), "barrier");
  if (ternCommDestroy(c.comm) != ternSuccess) return failf(ctx, "destroy failed");
  return c.failures ? 1 : 0;
}

class SmallMessages : public ::testing::TestWithParam<int> {};

void runEveryCollective(int nranks, size_t l) {
  limit = l;
  expectAllRanksOk(runRanks(nranks,
                            transportEnv("shm", {{"TERN_TIMEOUT", "60"}, {"TERN_LL_BYTES", std::to_string(l)}}),
                            everyCollectiveBody, 1, 300));
}

TEST_P(SmallMessages, EveryCollectiveRightOnAndAroundTheLimit) { runEveryCollective(GetParam(), 24); }

TEST_P(SmallMessages, ManyLineMessagesRightOnAndAroundALargerLimit) { runEveryCollective(GetParam(), 4096); }

// x[i] = (rank + i % 1000) * scale: the sum over ranks is exact.
void fill(std::vector<float>& x, int rank, float scale) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = (rank + static_cast<float>(i % 1000)) * scale;
}

bool sumIsRight(const std::vector<float>& x, int nranks, float scale) {
  const float ranks = nranks * (nranks - 1) / 2.0f;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != (ranks + nranks * static_cast<float>(i % 1000)) * scale) return false;
  return true;
}

// Small and large allreduces and sends at one level, issued together as one
// request: on each connection they alternate between the LL stream and the
// fifo, and each must meet its own counterpart.
int mixedBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm();
  const int n = ctx.nranks, r = ctx.rank;
  const size_t sizes[] = {5, 300000, 6, 7, 1, 65536, 1000};  // <= 6 floats: the LL stream
  std::vector<std::vector<float>> ar, out, in;
  for (size_t k = 0; k < std::size(sizes); ++k) {
    ar.emplace_back(sizes[k]);
    fill(ar.back(), r, static_cast<float>(k + 1));
    out.emplace_back(sizes[k]);
    fill(out.back(), r, static_cast<float>(k + 1));
    in.emplace_back(sizes[k], -1.0f);
  }
  ternRequest_t req = nullptr;
  ternGroupStart();
  for (size_t k = 0; k < ar.size(); ++k) {
    ternAllReduce(ar[k].data(), ar[k].data(), ar[k].size(), ternFloat32, ternSum, comm, nullptr);
    ternSend(out[k].data(), out[k].size(), ternFloat32, (r + 1) % n, comm, nullptr);
    ternRecv(in[k].data(), in[k].size(), ternFloat32, (r + n - 1) % n, comm, nullptr);
  }
  if (ternGroupEndAsync(&req) != ternSuccess || ternRequestWait(req) != ternSuccess)
    return failf(ctx, "mixed request: %s", ternGetLastError(comm));
  for (size_t k = 0; k < ar.size(); ++k) {
    std::vector<float> want(sizes[k]);
    fill(want, (r + n - 1) % n, static_cast<float>(k + 1));
    if (!sumIsRight(ar[k], n, static_cast<float>(k + 1)) || in[k] != want)
      return failf(ctx, "operation %zu (%zu floats) came out wrong", k, sizes[k]);
  }
  return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
}

TEST_P(SmallMessages, SmallAndLargeInFlightTogether) {
  expectAllRanksOk(runRanks(GetParam(), transportEnv("shm", {{"TERN_TIMEOUT", "60"}, {"TERN_LL_BYTES", "24"}}), mixedBody, 1, 300));
}

// A bulk allreduce runs as a request at level 7; a small one at level 0,
// issued after it, must finish while the bulk one is still running.
int overtakeBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm();
  std::vector<float> bulk(16 << 20), urgent(4);  // 64 MiB and 16 bytes
  fill(bulk, ctx.rank, 1.0f);
  fill(urgent, ctx.rank, 2.0f);
  ternBarrier(comm);
  ternSetPriority(7);
  ternRequest_t req = nullptr;
  ternGroupStart();
  ternAllReduce(bulk.data(), bulk.data(), bulk.size(), ternFloat32, ternSum, comm, nullptr);
  ternGroupEndAsync(&req);
  ternSetPriority(0);
  if (ternAllReduce(urgent.data(), urgent.data(), urgent.size(), ternFloat32, ternSum, comm, nullptr) !=
      ternSuccess)
    return failf(ctx, "urgent allreduce: %s", ternGetLastError(comm));
  int done = -1;
  if (ternRequestTest(req, &done) != ternSuccess || done)
    return failf(ctx, "the bulk allreduce finished before the small urgent one");
  if (ternRequestWait(req) != ternSuccess) return failf(ctx, "bulk: %s", ternGetLastError(comm));
  if (!sumIsRight(bulk, ctx.nranks, 1.0f) || !sumIsRight(urgent, ctx.nranks, 2.0f))
    return failf(ctx, "wrong sums");
  return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
}

TEST_P(SmallMessages, UrgentSmallOperationOvertakesBulk) {
  expectAllRanksOk(runRanks(GetParam(), transportEnv("shm", {{"TERN_TIMEOUT", "60"}, {"TERN_LL_BYTES", "24"}}), overtakeBody, 1, 300));
}

INSTANTIATE_TEST_SUITE_P(Shm, SmallMessages, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// One rank's operation is just over the limit (24 bytes: fifo), the others'
// at it (LL stream): each waits on a different stream, and the descriptor waiting on
// the other one names both calls.
struct AcrossTheLimit {
  const char* name;
  ternResult_t (*call)(ternComm_t, int rank, int nranks, std::vector<float>&);
  const char* evidence;
};

const AcrossTheLimit kAcross[] = {
    {"allreduce",
     [](ternComm_t c, int r, int n, std::vector<float>& x) {
       return ternAllReduce(x.data(), x.data(), r == n - 1 ? 7 : 6, ternFloat32, ternSum, c, nullptr);
     },
     "allreduce of 7 float32"},
    {"send/recv",
     [](ternComm_t c, int r, int n, std::vector<float>& x) {
       if (r == 0) return ternSend(x.data(), 6, ternFloat32, n - 1, c, nullptr);
       if (r == n - 1) return ternRecv(x.data(), 12, ternFloat32, 0, c, nullptr);
       return ternSuccess;
     },
     "recv of 12 float32"},
};

TEST(SmallMessagesMismatch, SizesAcrossTheLimitAreInvalidUsageNamingBothCalls) {
  for (const AcrossTheLimit& m : kAcross) {
    SCOPED_TRACE(m.name);
    auto body = [&](RankCtx& ctx) {
      ternComm_t comm = ctx.comm();
      std::vector<float> x(4096, 1.0f);
      if (ternAllReduce(x.data(), x.data(), 8, ternFloat32, ternSum, comm, nullptr) != ternSuccess)
        return failf(ctx, "warm-up failed");
      ternResult_t r = m.call(comm, ctx.rank, ctx.nranks, x);
      if (r == ternSuccess)  // a rank that did not read the other side learns it next
        r = ternAllReduce(x.data(), x.data(), 8, ternFloat32, ternSum, comm, nullptr);
      std::string err = ternGetLastError(comm);
      if (r != ternInvalidUsage || err.find("called") == std::string::npos ||
          err.find(m.evidence) == std::string::npos)
        return failf(ctx, "%s gave %s: %s", m.name, ternGetErrorString(r), err.c_str());
      return ternCommAbort(comm) == ternSuccess ? 0 : 1;
    };
    expectAllRanksOk(runRanks(3, transportEnv("shm", {{"TERN_TIMEOUT", "30"}, {"TERN_LL_BYTES", "24"}}), body, 1, 60));
  }
}

// A dead peer: an error at once; a stalled one: ternTimeout without
// spinning a core (small_fault_cases.h).
TEST(SmallMessagesFaults, DeadPeerIsAnError) {
  Signal go;
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_TIMEOUT", "60"}, {"TERN_LL_BYTES", "24"}}),
                            [&](RankCtx& ctx) { return deadPeerBody(ctx, go, nullptr); }, 1, 90));
}

TEST(SmallMessagesFaults, StalledPeerTimesOutWithoutBurningACore) {
  Signal done;
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_TIMEOUT", "1"}, {"TERN_LL_BYTES", "24"}}),
                            [&](RankCtx& ctx) { return stalledPeerBody(ctx, done); }, 1, 90));
}

}  // namespace
