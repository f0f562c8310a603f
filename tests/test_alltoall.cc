// All-to-all, gather and scatter over every transport, 1-4 ranks: sizes 1,
// odd and larger than the fifo, several datatypes, every root, in place and
// not, inside groups, bad arguments, and ranks that disagree on the root.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
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

}  // namespace
