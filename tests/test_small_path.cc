// The small path (engine/inline_runner.cc, comm/inline_calls.cc): a blocking small
// collective on an idle communicator runs on the caller's thread with whole
// messages and hands over to the engine when it must.  Real processes over
// shm.  White-box: the engine's counters say which path each rank took, so
// a test cannot pass with the path silently off.
//
// - every collective, datatype and op, and send/recv in groups, at 2-5
//   ranks, with the path on everywhere and with one rank's off
//   (TERN_SMALL_PATH=0: that rank's plan must meet the others' plan-free
//   messages byte for byte);
// - a late peer: the waiting rank hands over and the result is still right;
// - ranks that call different operations: ternInvalidUsage naming both;
// - a dead peer: an error at once; a stalled one: ternTimeout, without
//   spinning a core for the whole wait;
// - two threads at two levels on one communicator, and a small operation
//   issued while a bulk one is in flight (the engine is not idle: no path).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "checker.h"
#include "comm/comm.h"
#include "harness.h"
#include "small_fault_cases.h"

using namespace terntest;

namespace {


uint64_t doneAlone(ternComm_t c) { return c->engine->smallPathDone(); }
uint64_t handed(ternComm_t c) { return c->engine->smallPathHanded(); }

// Rank `off` (-1: none) runs with the path off.
ternComm_t commWithPathOffOn(RankCtx& ctx, int off) {
  setenv("TERN_SMALL_PATH", ctx.rank == off ? "0" : "1", 1);
  return ctx.comm();
}

// A group of a send to the next rank and a receive from the previous one
// (the small path takes both at once: distinct streams).
void ringSendRecv(Checker& c, size_t count) {
  const int n = c.ctx.nranks, r = c.ctx.rank, from = (r + n - 1) % n;
  std::vector<int32_t> out(count), in(count, -1);
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(r * 100000 + i);
  ternGroupStart();
  ternSend(out.data(), count, ternInt32, (r + 1) % n, c.comm, nullptr);
  ternRecv(in.data(), count, ternInt32, from, c.comm, nullptr);
  if (!c.ok(ternGroupEnd(), "send/recv")) return;
  for (size_t i = 0; i < count; ++i)
    if (in[i] != static_cast<int32_t>(from * 100000 + i)) {
      c.report("send/recv", ternInt32, ternSum, count, false, from, 1, i, in[i], from * 100000 + i);
      return;
    }
}

int everyCollective(RankCtx& ctx, int off) {
  Checker c{ctx, commWithPathOffOn(ctx, off)};
  const int n = ctx.nranks;
  uint64_t ops = 0;  // the operations issued: a send and a receive each per sendrecv
  for (ternDataType_t dt : sweptTypes()) {
    for (size_t count : {size_t(1), size_t(7), size_t(2048) / ternTypeSize(dt)})
      for (bool inplace : {false, true}) {
        for (ternRedOp_t op : sweptOps()) {
          c.allReduce(dt, op, count, inplace);
          c.reduce(dt, op, count, inplace, static_cast<int>(count % n));
          c.reduceScatter(dt, op, count, inplace);
          ops += 3;
        }
        c.allGather(dt, count, inplace);
        c.broadcast(dt, count, inplace, static_cast<int>((count + 1) % n));
        ops += 2;
      }
  }
  for (int k = 0; k < 5; ++k, ++ops) c.ok(ternBarrier(c.comm), "barrier");
  for (size_t count : {1, 7, 512})
    for (int k = 0; k < 3; ++k, ops += 2) ringSendRecv(c, count);
  // With more ranks than cores some waits outlast the spin (handed over):
  // what must hold is that the path took at least half of the operations
  // and finished some.
  const uint64_t alone = doneAlone(c.comm), tried = alone + handed(c.comm);
  if (ctx.rank == off && tried != 0)
    return failf(ctx, "the path is off here but took %llu operations", (unsigned long long)tried);
  if (ctx.rank != off && (alone == 0 || tried < ops / 2))
    return failf(ctx, "the small path took %llu operations and finished %llu", (unsigned long long)tried,
                 (unsigned long long)alone);
  if (ternCommDestroy(c.comm) != ternSuccess) return failf(ctx, "destroy failed");
  return c.failures ? 1 : 0;
}

class SmallPath : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(SmallPath, EveryCollectiveRightAndMatchingAnEnginePeer) {
  const int nranks = std::get<0>(GetParam()), off = std::get<1>(GetParam());
  expectAllRanksOk(runRanks(nranks, transportEnv("shm", {{"TERN_TIMEOUT", "60"}}),
                            [&](RankCtx& ctx) { return everyCollective(ctx, off); }, 1, 300));
}

INSTANTIATE_TEST_SUITE_P(Shm, SmallPath,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5), ::testing::Values(-1, 1)),
                         [](const auto& info) {
                           const int off = std::get<1>(info.param);
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (off < 0 ? std::string("allOn") : "rank" + std::to_string(off) + "Off");
                         });

// Shared memory packs small messages: a descriptor starts on any 8-byte
// boundary that keeps it and a header within the 4 KiB page (recordSkip), and
// a call that repeats the stream's last but for its seq sends its descriptor
// as one word (op_desc.h, kRepeatTag), so an 8-byte broadcast's message takes
// 16 bytes of the root's stream, four calls to a cache line, where a whole
// descriptor took 40 and a 32-byte alignment 64.  Counted from the bytes the
// root committed, on both paths (the root's small path on or off), and with
// the calls alternating between two counts, where every descriptor goes
// whole and the results must still be right.
TEST(SmallPathPacking, AnEightByteBroadcastTakesSixteenBytesOfItsStream) {
  for (int off : {-1, 0})
    for (bool alternate : {false, true}) {
      SCOPED_TRACE(std::string(off < 0 ? "path on" : "root's path off") + (alternate ? ", alternating" : ""));
      expectAllRanksOk(runRanks(2, transportEnv("shm"), [&](RankCtx& ctx) {
        ternComm_t comm = commWithPathOffOn(ctx, off);
        const int calls = 1000;
        double v[2] = {ctx.rank == 0 ? 3.0 : 0.0, ctx.rank == 0 ? 4.0 : 0.0};
        ternCommStats_t before{}, after{};
        if (ternBroadcast(v, v, 1, ternFloat64, 0, comm, nullptr) != ternSuccess)
          return failf(ctx, "warm-up");
        ternCommGetStats(comm, &before);
        for (int i = 0; i < calls; ++i) {
          if (ctx.rank == 1) v[0] = v[1] = 0.0;
          const size_t count = alternate ? 1 + i % 2 : 1;
          if (ternBroadcast(v, v, count, ternFloat64, 0, comm, nullptr) != ternSuccess)
            return failf(ctx, "broadcast: %s", ternGetLastError(comm));
          if (v[0] != 3.0 || (count == 2 && v[1] != 4.0))
            return failf(ctx, "call %d received %g %g, want 3 4", i, v[0], v[1]);
        }
        ternCommGetStats(comm, &after);
        const double perCall = double(after.bytesSent - before.bytesSent) / calls;
        // The root: 16 bytes a message (whole descriptors: 32 + 8 and 32 +
        // 16 bytes in turn, 44), and at most 64 of padding per 4 KiB page.
        const double want = alternate ? 44 : 16;
        if (ctx.rank == 0 && (perCall < want || perCall > want + 1))
          return failf(ctx, "the root committed %.2f bytes a call, want %.0f", perCall, want);
        ternCommDestroy(comm);
        return 0;
      }));
    }
}

// Rank 1 comes 20 ms late to each call: rank 0's steps wait past the spin,
// the engine takes them over where they stood, and the results are right.
TEST(SmallPathHandOver, LatePeerHandsOverAndTheResultIsRight) {
  auto body = [&](RankCtx& ctx) {
    Checker c{ctx, ctx.comm()};
    for (int k = 0; k < 6; ++k) {
      if (ctx.rank == 1) usleep(20000);
      if (k % 3 == 0) c.allReduce(ternFloat32, ternSum, 5, false);
      if (k % 3 == 1) c.allReduce(ternInt64, ternAvg, 3, true);
      if (k % 3 == 2) c.broadcast(ternInt32, 9, false, 1);
    }
    if (ctx.rank == 0 && handed(c.comm) < 4)
      return failf(ctx, "handed %llu of 6 late operations to the engine", (unsigned long long)handed(c.comm));
    ternCommDestroy(c.comm);
    return c.failures ? 1 : 0;
  };
  expectAllRanksOk(runRanks(3, transportEnv("shm", {{"TERN_TIMEOUT", "60"}}), body, 1, 120));
}

// Ranks calling different operations: every rank gets ternInvalidUsage
// naming the other's call, whichever path read the descriptor.
struct Mismatch {
  const char* name;
  ternResult_t (*call)(ternComm_t, int rank, std::vector<int32_t>&);
  const char* evidence;  // in rank 0's sentence
};
const Mismatch kMismatches[] = {
    {"counts",
     [](ternComm_t c, int r, std::vector<int32_t>& x) {
       return ternAllReduce(x.data(), x.data(), r == 0 ? 2 : 3, ternInt32, ternSum, c, nullptr);
     },
     "allreduce of 3 int32"},
    {"kinds",
     [](ternComm_t c, int r, std::vector<int32_t>& x) {
       return r == 0 ? ternAllReduce(x.data(), x.data(), 1, ternInt32, ternSum, c, nullptr) : ternBarrier(c);
     },
     "barrier"},
    {"ops",
     [](ternComm_t c, int r, std::vector<int32_t>& x) {
       return ternAllReduce(x.data(), x.data(), 4, ternInt32, r == 0 ? ternSum : ternMax, c, nullptr);
     },
     "(max)"},
};

// After many warm-ups alike, rank 1's "allreduce of 3" repeats its last
// descriptor in one word (op_desc.h, kRepeatTag), which rank 0 must rebuild
// to name it; one rank's path off: the engine reads it.
TEST(SmallPathMismatch, DifferentCallsAreInvalidUsageNamingBoth) {
  for (const Mismatch& m : kMismatches)
    for (int warmups : {1, 50})
      for (int off : {-1, 0, 1}) {
        SCOPED_TRACE(std::string(m.name) + ", " + std::to_string(warmups) + " warm-ups, path off on rank " +
                     std::to_string(off));
        auto body = [&](RankCtx& ctx) {
          ternComm_t comm = commWithPathOffOn(ctx, off);
          std::vector<int32_t> x(64, 1);
          for (int k = 0; k < warmups; ++k)
            if (ternAllReduce(x.data(), x.data(), 3, ternInt32, ternSum, comm, nullptr) != ternSuccess)
              return failf(ctx, "warm-up failed");
          ternResult_t r = m.call(comm, ctx.rank, x);
          std::string err = ternGetLastError(comm);
          if (r != ternInvalidUsage || err.find("called") == std::string::npos ||
              (ctx.rank == 0 && err.find(m.evidence) == std::string::npos))
            return failf(ctx, "%s gave %s: %s", m.name, ternGetErrorString(r), err.c_str());
          return ternCommAbort(comm) == ternSuccess ? 0 : 1;
        };
        expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_TIMEOUT", "30"}}), body, 1, 60));
      }
}

// A dead peer: an error at once; a stalled one: ternTimeout without
// spinning a core (small_fault_cases.h).
TEST(SmallPathFaults, DeadPeerIsAnError) {
  Signal go;
  auto tookThePath = [](RankCtx& c, ternComm_t k) {
    return doneAlone(k) + handed(k) ? 0 : failf(c, "the warm-up took no small path");
  };
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_TIMEOUT", "60"}}),
                            [&](RankCtx& ctx) { return deadPeerBody(ctx, go, tookThePath); }, 1, 90));
}

TEST(SmallPathFaults, StalledPeerTimesOutWithoutBurningACore) {
  Signal done;
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_TIMEOUT", "1"}}),
                            [&](RankCtx& ctx) { return stalledPeerBody(ctx, done); }, 1, 90));
}

// Groups' sends and receives are recorded and run as transfers without
// operations (api/group.cc, comm/inline_calls.cc, transfersInline).  Each case checks
// the data: a plain ring send/recv (counted on the path), a late peer (the
// engine takes the transfers over as operations numbered as they were),
// blocking sends and receives outside a group (groups of one), a
// group whose recorded calls meet a collective (made into operations first,
// in call order), two sends to one peer (not one message per stream: made
// into operations), a group ended asynchronously, and a communicator aborted
// before its group ended (an error naming it, no crash).
int recordedGroupsBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm();
  const int n = ctx.nranks, r = ctx.rank, next = (r + 1) % n, prev = (r + n - 1) % n;
  auto ring = [&](int tag, bool late, bool async) -> int {
    int32_t out[3] = {tag, r, tag * r}, in[3] = {-1, -1, -1};
    if (late && r == 1) usleep(20000);
    ternGroupStart();
    ternSend(out, 3, ternInt32, next, comm, nullptr);
    ternRecv(in, 3, ternInt32, prev, comm, nullptr);
    ternRequest_t req = nullptr;
    ternResult_t e = async ? ternGroupEndAsync(&req) : ternGroupEnd();
    if (e == ternSuccess && async) e = ternRequestWait(req);
    if (e != ternSuccess) return failf(ctx, "ring %d: %s", tag, ternGetLastError(comm));
    if (in[0] != tag || in[1] != prev || in[2] != tag * prev)
      return failf(ctx, "ring %d got %d %d %d from rank %d", tag, in[0], in[1], in[2], prev);
    return 0;
  };
  const uint64_t before = doneAlone(comm);
  for (int k = 0; k < 50; ++k)
    if (ring(k, false, false)) return 1;
  if (doneAlone(comm) - before < 50) return failf(ctx, "50 send/recv groups finished %llu transfers on the path",
                                                  (unsigned long long)(doneAlone(comm) - before));
  const uint64_t handedBefore = handed(comm);
  for (int k = 0; k < 3; ++k)
    if (ring(100 + k, true, false)) return 1;
  if (r == 0 && handed(comm) == handedBefore) return failf(ctx, "a late peer's transfers were not handed over");
  if (ring(200, false, true)) return 1;
  // Blocking ones outside a group, each a group of one (a small send is
  // eager: it completes before its receiver calls).
  for (int k = 0; k < 20; ++k) {
    int32_t o = 10 * k + r, i = -1;
    if (ternSend(&o, 1, ternInt32, next, comm, nullptr) != ternSuccess ||
        ternRecv(&i, 1, ternInt32, prev, comm, nullptr) != ternSuccess || i != 10 * k + prev)
      return failf(ctx, "blocking send/recv %d got %d: %s", k, i, ternGetLastError(comm));
  }
  // Recorded calls, then a collective in the same group.
  int32_t out = 7 * r, in = -1, sum = 1;
  ternGroupStart();
  ternSend(&out, 1, ternInt32, next, comm, nullptr);
  ternRecv(&in, 1, ternInt32, prev, comm, nullptr);
  ternAllReduce(&sum, &sum, 1, ternInt32, ternSum, comm, nullptr);
  if (ternGroupEnd() != ternSuccess || in != 7 * prev || sum != n)
    return failf(ctx, "send/recv + allreduce group: got %d and %d: %s", in, sum, ternGetLastError(comm));
  // Two sends to one peer and two receives from another, in call order.
  int32_t o2[2] = {11 * r, 13 * r}, i2[2] = {-1, -1};
  ternGroupStart();
  ternSend(&o2[0], 1, ternInt32, next, comm, nullptr);
  ternSend(&o2[1], 1, ternInt32, next, comm, nullptr);
  ternRecv(&i2[0], 1, ternInt32, prev, comm, nullptr);
  ternRecv(&i2[1], 1, ternInt32, prev, comm, nullptr);
  if (ternGroupEnd() != ternSuccess || i2[0] != 11 * prev || i2[1] != 13 * prev)
    return failf(ctx, "two sends per peer: got %d %d: %s", i2[0], i2[1], ternGetLastError(comm));
  // Aborted with a recorded send pending: ternGroupEnd says so.
  ternGroupStart();
  ternSend(&out, 1, ternInt32, next, comm, nullptr);
  ternCommAbort(comm);
  ternResult_t e = ternGroupEnd();
  if (e != ternInvalidUsage || !strstr(ternGetLastError(nullptr), "destroyed or aborted"))
    return failf(ctx, "a group on an aborted communicator gave %s: %s", ternGetErrorString(e),
                 ternGetLastError(nullptr));
  return 0;
}

TEST(SmallPathGroups, RecordedSendsAndReceivesRunAsTransfers) {
  for (int n : {2, 3})
    expectAllRanksOk(runRanks(n, transportEnv("shm", {{"TERN_TIMEOUT", "60"}}), recordedGroupsBody, 1, 120));
}

// Two threads per rank on one communicator, at levels 1 and 5, each making
// small allreduces of its own values: whichever thread finds the engine
// idle runs its call alone, the other's waits or goes through the engine;
// every result is right.  Then a small allreduce while a bulk one is in
// flight at level 7: the engine is busy, so it goes through the engine.
TEST(SmallPathConcurrency, TwoThreadsAtTwoLevelsAndASmallCallBesideBulk) {
  auto body = [&](RankCtx& ctx) {
    ternComm_t comm = ctx.comm();
    const int n = ctx.nranks;
    int bad = 0;
    auto worker = [&](int level, int32_t base) {
      ternSetPriority(level);
      for (int k = 0; k < 3000; ++k) {
        int32_t v[3] = {base + ctx.rank, k, -ctx.rank};
        if (ternAllReduce(v, v, 3, ternInt32, ternSum, comm, nullptr) != ternSuccess ||
            v[0] != n * base + n * (n - 1) / 2 || v[1] != n * k || v[2] != -n * (n - 1) / 2)
          ++bad;
      }
    };
    std::thread a(worker, 1, 1000), b(worker, 5, 7);
    a.join();
    b.join();
    if (bad) return failf(ctx, "%d wrong or failed allreduces", bad);
    if (doneAlone(comm) + handed(comm) == 0) return failf(ctx, "no call tried the small path");
    std::vector<float> bulk(4 << 20, 1.0f);
    ternSetPriority(7);
    ternRequest_t req;
    ternGroupStart();
    ternAllReduce(bulk.data(), bulk.data(), bulk.size(), ternFloat32, ternSum, comm, nullptr);
    if (ternGroupEndAsync(&req) != ternSuccess) return failf(ctx, "bulk issue failed");
    ternSetPriority(0);
    ternResult_t state;
    if (ternCommGetAsyncError(comm, &state) != ternSuccess || state != ternInProgress)
      return failf(ctx, "the bulk allreduce was not in flight (%s): nothing to test", ternGetErrorString(state));
    const uint64_t before = doneAlone(comm);
    float s = 1.0f;
    if (ternAllReduce(&s, &s, 1, ternFloat32, ternSum, comm, nullptr) != ternSuccess || s != n)
      return failf(ctx, "the urgent allreduce gave %g", s);
    if (ternRequestWait(req) != ternSuccess || bulk[12345] != n) return failf(ctx, "the bulk allreduce failed");
    if (doneAlone(comm) != before) return failf(ctx, "a call beside in-flight work took the small path");
    return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
  };
  for (int n : {2, 3})
    expectAllRanksOk(runRanks(n, transportEnv("shm", {{"TERN_TIMEOUT", "60"}}), body, 1, 180));
}

}  // namespace
