// All-to-all, gather and scatter over every transport, 1-4 ranks: sizes 1,
// odd and larger than the fifo, several datatypes, every root, in place and
// not, inside groups, bad arguments, and ranks that disagree on the root.
// All-to-all around its small-block threshold (one program, sends first) and
// with a peer that dies in the middle of one.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace terntest;

namespace {

// Element i of the block rank `from` sends to rank `to`.
double value(int from, int to, size_t i) { return from * 1000 + to * 100 + static_cast<double>(i % 97); }

template <class T>
int checkBlocks(RankCtx& ctx, const std::vector<T>& buf, size_t count, const char* what,
                const std::function<double(int j, size_t i)>& want) {
  for (int j = 0; j < ctx.nranks; ++j)
    for (size_t i = 0; i < count; i += (count > 4096 ? 61 : 1))
      if (buf[j * count + i] != static_cast<T>(want(j, i)))  // wraps like the data (uint8)
        return failf(ctx, "%s count %zu: block %d element %zu is %g, want %g", what, count, j, i,
                     static_cast<double>(buf[j * count + i]), want(j, i));
  return 0;
}

template <class T>
int exercise(RankCtx& ctx, ternComm_t comm, ternDataType_t dt, size_t count) {
  const int n = ctx.nranks, me = ctx.rank;
  std::vector<T> send(count * n), recv(count * n);
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < count; ++i) send[j * count + i] = static_cast<T>(value(me, j, i));
  if (ternAllToAll(send.data(), recv.data(), count, dt, comm, nullptr) != ternSuccess)
    return failf(ctx, "alltoall: %s", ternGetLastError(comm));
  if (checkBlocks(ctx, recv, count, "alltoall", [&](int j, size_t i) { return value(j, me, i); }))
    return 1;
  std::vector<T> inplace(send);  // in place: sent blocks are replaced by received ones
  if (ternAllToAll(inplace.data(), inplace.data(), count, dt, comm, nullptr) != ternSuccess ||
      checkBlocks(ctx, inplace, count, "in-place alltoall", [&](int j, size_t i) { return value(j, me, i); }))
    return failf(ctx, "in-place alltoall: %s", ternGetLastError(comm));
  for (int root = 0; root < n; ++root) {
    for (bool inplace : {false, true}) {
      // gather: every rank's block `root`; in place on the root: sendbuff inside recvbuff
      std::fill(recv.begin(), recv.end(), T(0));
      const T* s = send.data() + root * count;
      if (inplace && me == root) {
        std::copy(s, s + count, recv.begin() + root * count);
        s = recv.data() + root * count;
      }
      if (ternGather(s, recv.data(), count, dt, root, comm, nullptr) != ternSuccess)
        return failf(ctx, "gather: %s", ternGetLastError(comm));
      if (me == root &&
          checkBlocks(ctx, recv, count, "gather", [&](int j, size_t i) { return value(j, root, i); }))
        return 1;
      // scatter: the root's blocks go out; in place: recvbuff inside sendbuff
      std::vector<T> mine(count);
      T* r = inplace && me == root ? send.data() + me * count : mine.data();
      if (ternScatter(send.data(), r, count, dt, root, comm, nullptr) != ternSuccess)
        return failf(ctx, "scatter: %s", ternGetLastError(comm));
      for (size_t i = 0; i < count; ++i)
        if (me != root && r[i] != static_cast<T>(value(root, me, i)))  // the root keeps its own
          return failf(ctx, "scatter root %d element %zu is %g", root, i, static_cast<double>(r[i]));
    }
  }
  return 0;
}

int bodyAll(RankCtx& ctx) {
  ternComm_t comm = ctx.comm();
  for (size_t count : {size_t(1), size_t(1023), size_t(3u << 20)}) {  // 3M x 4 B > the fifo
    if (exercise<float>(ctx, comm, ternFloat32, count)) return 1;
    if (count < 4096 && (exercise<int64_t>(ctx, comm, ternInt64, count) ||
                         exercise<uint8_t>(ctx, comm, ternUint8, count)))
      return 1;
  }
  // Inside a group, with an allreduce after it.
  std::vector<float> s(4 * ctx.nranks, 1.0f), r(4 * ctx.nranks), x(8, 1.0f);
  ternGroupStart();
  ternAllToAll(s.data(), r.data(), 4, ternFloat32, comm, nullptr);
  ternAllReduce(x.data(), x.data(), 8, ternFloat32, ternSum, comm, nullptr);
  if (ternGroupEnd() != ternSuccess || r[4 * ctx.nranks - 1] != 1.0f || x[7] != ctx.nranks)
    return failf(ctx, "group: %s", ternGetLastError(comm));
  return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
}

class AllToAll : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AllToAll, GatherScatterEveryRootAndSize) {
  auto [transport, nranks] = GetParam();
  expectAllRanksOk(runRanks(nranks, transportEnv(transport, {{"TERN_TIMEOUT", "30"}}), bodyAll, 1, 180));
}

INSTANTIATE_TEST_SUITE_P(Transports, AllToAll,
                         ::testing::Combine(::testing::ValuesIn(testTransports()),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) { return transportRanksName(info); });

int badArgsBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm();
  std::vector<float> a(16), b(16);
  if (ternAllToAll(a.data(), b.data(), 4, static_cast<ternDataType_t>(42), comm, nullptr) !=
      ternInvalidArgument)
    return failf(ctx, "datatype 42 accepted");
  if (ternGather(a.data(), b.data(), 4, ternFloat32, 7, comm, nullptr) != ternInvalidArgument ||
      !strstr(ternGetLastError(comm), "root 7"))
    return failf(ctx, "root 7 accepted");
  if (ternScatter(nullptr, b.data(), 4, ternFloat32, 0, comm, nullptr) != ternInvalidArgument ||
      !strstr(ternGetLastError(comm), "sendbuff is NULL on the root"))
    return failf(ctx, "NULL scatter source accepted: %s", ternGetLastError(comm));
  if (ternGather(a.data(), b.data(), 0, ternFloat32, 0, comm, nullptr) != ternSuccess)
    return failf(ctx, "count 0 is not a no-op");
  return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
}

TEST(AllToAllArgs, BadArgumentsAreRefusedWithASentence) {
  expectAllRanksOk(runRanks(1, {}, badArgsBody, 1, 30));
}

// Two ranks both think they are the gather's (or scatter's) root: every
// rank gets ternInvalidUsage naming both, instead of waiting for data.
int rootMismatchBody(RankCtx& ctx) {
  std::vector<float> a(8 * ctx.nranks, 1.0f), b(8 * ctx.nranks);
  int root = ctx.rank == ctx.nranks - 1 ? ctx.nranks - 1 : 0;
  for (bool gather : {true, false}) {
    ternComm_t comm = ctx.comm(gather ? 0 : 1);
    ternResult_t r = gather ? ternGather(a.data(), b.data(), 8, ternFloat32, root, comm, nullptr)
                            : ternScatter(a.data(), b.data(), 8, ternFloat32, root, comm, nullptr);
    if (r == ternSuccess)  // a rank the news reached after its part: the next call says it
      r = ternAllReduce(a.data(), a.data(), 1, ternFloat32, ternSum, comm, nullptr);
    if (r != ternInvalidUsage || !strstr(ternGetLastError(comm), "with root"))
      return failf(ctx, "%s root mismatch gave %s: %s", gather ? "gather" : "scatter",
                   ternGetErrorString(r), ternGetLastError(comm));
    ternCommAbort(comm);
  }
  return 0;
}

TEST(AllToAllArgs, RanksThatDisagreeOnTheRootGetInvalidUsage) {
  for (int n : {2, 3}) expectAllRanksOk(runRanks(n, {{"TERN_TIMEOUT", "20"}}, rootMismatchBody, 2, 60));
}

// ---- all-to-all around the small-block threshold --------------------------

// `reps` all-to-alls back to back, each out of place and in place (a call's
// sends may still sit unread in the fifos when the next one starts).
template <class T>
int alltoallRepeated(RankCtx& ctx, ternComm_t comm, ternDataType_t dt, size_t count, int reps) {
  const int n = ctx.nranks, me = ctx.rank;
  std::vector<T> send(count * n), recv(count * n);
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < count; ++i) send[j * count + i] = static_cast<T>(value(me, j, i));
  auto want = [&](int j, size_t i) { return value(j, me, i); };
  for (int k = 0; k < reps; ++k) {
    std::fill(recv.begin(), recv.end(), T(7));
    if (ternAllToAll(send.data(), recv.data(), count, dt, comm, nullptr) != ternSuccess)
      return failf(ctx, "alltoall count %zu: %s", count, ternGetLastError(comm));
    if (checkBlocks(ctx, recv, count, "alltoall", want)) return 1;
    recv = send;
    if (ternAllToAll(recv.data(), recv.data(), count, dt, comm, nullptr) != ternSuccess)
      return failf(ctx, "in-place alltoall count %zu: %s", count, ternGetLastError(comm));
    if (checkBlocks(ctx, recv, count, "in-place alltoall", want)) return 1;
  }
  return 0;
}

// A gather to the last rank and a scatter from it, checked.
template <class T>
int rootedOnce(RankCtx& ctx, ternComm_t comm, ternDataType_t dt, size_t count) {
  const int n = ctx.nranks, me = ctx.rank, root = n - 1;
  std::vector<T> all(count * n), got(count * n, T(7)), mine(count, T(7));
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < count; ++i) all[j * count + i] = static_cast<T>(value(me, j, i));
  if (ternGather(all.data() + root * count, got.data(), count, dt, root, comm, nullptr) != ternSuccess ||
      (me == root && checkBlocks(ctx, got, count, "gather", [&](int j, size_t i) { return value(j, root, i); })))
    return failf(ctx, "gather count %zu: %s", count, ternGetLastError(comm));
  if (ternScatter(all.data(), mine.data(), count, dt, root, comm, nullptr) != ternSuccess)
    return failf(ctx, "scatter count %zu: %s", count, ternGetLastError(comm));
  for (size_t i = 0; i < count; ++i)
    if (mine[i] != static_cast<T>(value(root, me, i)))
      return failf(ctx, "scatter count %zu element %zu is %g", count, i, static_cast<double>(mine[i]));
  return 0;
}

// Default settings: the threshold is TERN_SMALL_THRESHOLD (32 KiB blocks);
// gather and scatter take the same form.
int thresholdDefaultBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm();
  for (size_t count : {8191, 8192, 8193})
    if (alltoallRepeated<float>(ctx, comm, ternFloat32, count, 2)) return 1;
  for (size_t count : {32767, 32768, 32769})
    if (alltoallRepeated<uint8_t>(ctx, comm, ternUint8, count, 2)) return 1;
  for (size_t count : {8192, 8193})
    if (rootedOnce<float>(ctx, comm, ternFloat32, count)) return 1;
  return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
}

// A small fifo: the threshold is a quarter of it less room for descriptors
// (TERN_SMALL_THRESHOLD asks for more), and many calls queue in the fifos.
int thresholdSmallFifoBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm();
  for (size_t count : {1023, 1983, 1984, 1985, 2047, 2048, 2049, 4097})
    if (alltoallRepeated<uint8_t>(ctx, comm, ternUint8, count, 4)) return 1;
  for (size_t count : {495, 496, 497})
    if (alltoallRepeated<float>(ctx, comm, ternFloat32, count, 4)) return 1;
  return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
}

class AllToAllThreshold : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AllToAllThreshold, EitherSideOfTheSmallBlockPath) {
  auto [transport, nranks] = GetParam();
  expectAllRanksOk(runRanks(nranks, transportEnv(transport, {{"TERN_TIMEOUT", "30"}}),
                            thresholdDefaultBody, 1, 120));
  expectAllRanksOk(runRanks(nranks,
                            transportEnv(transport, {{"TERN_TIMEOUT", "30"},
                                                     {"TERN_CHUNKSIZE", "1024"},
                                                     {"TERN_BUFFSIZE", "8192"},
                                                     {"TERN_SMALL_THRESHOLD", "4096"}}),
                            thresholdSmallFifoBody, 1, 120));
  // Single copy from below the threshold: small blocks must stay in the
  // fifo (a direct send in the one-program form would wait for a receiver
  // that reads only after its own sends), large ones go direct.
  if (transport == "shm")
    expectAllRanksOk(runRanks(nranks,
                              transportEnv(transport, {{"TERN_TIMEOUT", "30"}, {"TERN_SHM_DIRECT", "4096"}}),
                              thresholdDefaultBody, 1, 120));
}

INSTANTIATE_TEST_SUITE_P(Transports, AllToAllThreshold,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(2, 3, 4)),
                         [](const auto& info) { return transportRanksName(info); });

// ---- a peer that dies in the middle of an all-to-all ------------------------

constexpr double kDeadTimeout = 10;  // TERN_TIMEOUT of these runs

// The last rank dies: `small` before it calls (the others' one-program
// all-to-all waits on it), or else once the first bytes of a large one
// (16x the fifo) have reached it, so the others are mid-transfer.  Every
// other rank gets an error, within TERN_TIMEOUT (plus a margin for a loaded
// host), at the latest on the call after the dying rank's last.
int deadPeerBody(RankCtx& ctx, bool small) {
  ternComm_t comm = ctx.comm();
  const size_t count = small ? 64 : (1u << 20);
  const int n = ctx.nranks, me = ctx.rank, calls = 3;
  std::vector<float> send(count * n, 1.0f), recv(count * n, -1.0f);
  if (me == n - 1) {
    if (small) _exit(0);
    std::thread([comm] {  // dies once the first bytes arrive (the statistics
      // are safe to read during traffic; the receive buffer is the engine's)
      ternCommStats_t st{};
      while (ternCommGetStats(comm, &st) == ternSuccess && st.bytesRecv == 0) usleep(50);
      _exit(0);
    }).detach();
    for (int k = 0; k < calls; ++k) ternAllToAll(send.data(), recv.data(), count, ternFloat32, comm, nullptr);
    _exit(0);  // the watcher was late: dead all the same before the others' next call
  }
  for (int k = 0; k <= calls; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    ternResult_t r = ternAllToAll(send.data(), recv.data(), count, ternFloat32, comm, nullptr);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == ternSuccess) continue;
    if (r != ternRemoteError && r != ternTimeout)
      return failf(ctx, "alltoall ended with %s: %s", ternGetErrorString(r), ternGetLastError(comm));
    if (secs > kDeadTimeout + 5) return failf(ctx, "the error took %.1f s", secs);
    return ternCommAbort(comm) == ternSuccess ? 0 : 1;
  }
  return failf(ctx, "%d all-to-alls succeeded with a dead peer", calls + 1);
}

class AllToAllDeadPeer : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AllToAllDeadPeer, IsAnErrorWithinTheTimeout) {
  auto [transport, nranks] = GetParam();
  for (bool small : {true, false}) {
    auto env = transportEnv(transport, {{"TERN_TIMEOUT", std::to_string((int)kDeadTimeout)},
                                        {"TERN_CHUNKSIZE", "65536"},
                                        {"TERN_BUFFSIZE", "262144"}});
    RunResult r = runRanks(nranks, env, [small](RankCtx& c) { return deadPeerBody(c, small); }, 1, 60);
    EXPECT_FALSE(r.timedOut) << (small ? "small" : "large");
    for (int i = 0; i < nranks; ++i) EXPECT_EQ(r.exitCodes[i], 0) << "rank " << i << (small ? " small" : " large");
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, AllToAllDeadPeer,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(2, 3)),
                         [](const auto& info) { return transportRanksName(info); });

}  // namespace
