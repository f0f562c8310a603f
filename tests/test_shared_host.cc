// Host memory from ternMemAlloc (memory/shared_host.h): a peer on the host
// maps the sender's allocation and copies straight out of it, one copy
// instead of the fifo's two, with single copy through process_vm_readv off
// (its default).  Checked here: bad arguments are clear errors; the data is
// right on both sides of the threshold for send/recv, all-to-all, gather,
// scatter, the 2-rank broadcast and allgather (a pair of transfers), whatever
// the receiver's buffer is, and a 2-rank reduce's root and each rank of a
// 2-rank reduce-scatter reduce straight out of the other's mapping; the
// bytes really went that way (the process's IPC counter); a sender that
// frees and allocates afresh does not leave its old allocations mapped in
// the receiver; and a sender that dies or aborts while its buffer is posted
// is an error on the survivor, not a hang and not a wrong message.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "memory/ipc.h"

using namespace terntest;

namespace {

constexpr size_t kThreshold = 128 << 10;  // direct_transfer.cc's kSharedHostMin (above TERN_SHM_IPC)
constexpr size_t kMappedReduceMax = 512 << 10;  // and its kMappedReduceMax
constexpr size_t kPairFrom = 256 << 10;         // collectives/transfers.h's kPairFromBytes

uint8_t byteOf(int from, int to, size_t i) { return static_cast<uint8_t>(from * 29 + to * 5 + i % 253); }

// A ternMemAlloc buffer for the length of a scope.
struct Shared {
  explicit Shared(size_t n) {
    if (ternMemAlloc(reinterpret_cast<void**>(&p), n) != ternSuccess) p = nullptr;
  }
  ~Shared() { ternMemFree(p); }
  uint8_t* p = nullptr;
};

uint64_t ipcBytes() { return tern::deviceTraffic().ipc; }

// Two ranks over shared memory with TERN_TIMEOUT at `timeout` seconds: every
// rank's body must return 0 within a minute.
void twoRanks(const char* timeout, const Body& body) {
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_TIMEOUT", timeout}}), body, 1, 60));
}

TEST(SharedHostMemory, BadArgumentsAreClearErrors) {
  void* p = nullptr;
  EXPECT_EQ(ternMemAlloc(nullptr, 16), ternInvalidArgument);
  EXPECT_NE(std::string(ternGetLastError(nullptr)).find("ptr is NULL"), std::string::npos);
  EXPECT_EQ(ternMemAlloc(&p, 0), ternInvalidArgument);
  EXPECT_NE(std::string(ternGetLastError(nullptr)).find("size is 0"), std::string::npos);
  int onStack = 0;
  EXPECT_EQ(ternMemFree(&onStack), ternInvalidArgument);
  EXPECT_NE(std::string(ternGetLastError(nullptr)).find("not returned by ternMemAlloc"), std::string::npos);
  EXPECT_EQ(ternMemFree(nullptr), ternSuccess);
  ASSERT_EQ(ternMemAlloc(&p, 10000), ternSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < 10000; ++i) ASSERT_EQ(b[i], 0) << "byte " << i;
  memset(p, 7, 10000);
  EXPECT_EQ(ternMemFree(p), ternSuccess);
  EXPECT_EQ(ternMemFree(p), ternInvalidArgument);  // twice
}

// Every plain transfer of `bytes` out of shared buffers (receiving into
// shared ones on even ranks, into plain vectors on odd ones).  Returns
// failures; *viaMap: the bytes this rank copied out of a peer's mapping.
int exchange(RankCtx& ctx, ternComm_t comm, size_t bytes, uint64_t* viaMap) {
  const int n = ctx.nranks, me = ctx.rank;
  Shared out(bytes * n), all(bytes * n), sharedIn(bytes * n);
  std::vector<uint8_t> plainIn(bytes * n);
  uint8_t* in = me % 2 == 0 ? sharedIn.p : plainIn.data();
  if (!out.p || !all.p || !sharedIn.p) return failf(ctx, "ternMemAlloc: %s", ternGetLastError(nullptr));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < bytes; ++i) out.p[p * bytes + i] = all.p[p * bytes + i] = byteOf(me, p, i);
  const uint64_t before = ipcBytes();
  auto check = [&](const char* what, int from, const uint8_t* got, int to) {
    for (size_t i = 0; i < bytes; ++i)
      if (got[i] != byteOf(from, to, i))
        return failf(ctx, "%s of %zu bytes from rank %d: byte %zu is %d", what, bytes, from, i, got[i]);
    return 0;
  };
  ternGroupStart();
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    ternRecv(in + p * bytes, bytes, ternUint8, p, comm, nullptr);
    ternSend(out.p + p * bytes, bytes, ternUint8, p, comm, nullptr);
  }
  if (ternGroupEnd() != ternSuccess) return failf(ctx, "send/recv: %s", ternGetLastError(comm));
  for (int p = 0; p < n; ++p)
    if (p != me && check("send/recv", p, in + p * bytes, me)) return 1;
  if (ternAllToAll(all.p, in, bytes, ternUint8, comm, nullptr) != ternSuccess)
    return failf(ctx, "all-to-all: %s", ternGetLastError(comm));
  for (int p = 0; p < n; ++p)
    if (check("all-to-all", p, in + p * bytes, me)) return 1;
  if (ternGather(all.p + me * bytes, in, bytes, ternUint8, 0, comm, nullptr) != ternSuccess)
    return failf(ctx, "gather: %s", ternGetLastError(comm));
  for (int p = 0; me == 0 && p < n; ++p)
    if (check("gather", p, in + p * bytes, p)) return 1;
  if (ternScatter(all.p, in, bytes, ternUint8, n - 1, comm, nullptr) != ternSuccess)
    return failf(ctx, "scatter: %s", ternGetLastError(comm));
  if (check("scatter", n - 1, in, me)) return 1;
  if (ternBroadcast(all.p, in, bytes, ternUint8, n - 1, comm, nullptr) != ternSuccess)
    return failf(ctx, "broadcast: %s", ternGetLastError(comm));
  if (check("broadcast", n - 1, in, 0)) return 1;
  if (ternAllGather(all.p + me * bytes, in, bytes, ternUint8, comm, nullptr) != ternSuccess)
    return failf(ctx, "allgather: %s", ternGetLastError(comm));
  for (int p = 0; p < n; ++p)
    if (check("allgather", p, in + p * bytes, p)) return 1;
  *viaMap = ipcBytes() - before;
  return 0;
}

// What `exchange` moves into rank r out of peers' mappings at a size at or
// above the threshold: a send and an all-to-all block from each peer, the
// gather's blocks at rank 0, the scatter's block from the last rank, and
// at 2 ranks the broadcast and, from kPairFrom, the allgather's block
// (rings of more forward on the way).
uint64_t mappedInto(int r, int n, size_t bytes) {
  uint64_t blocks = 2 * (n - 1) + (r == 0 ? n - 1 : 0) + (r != n - 1 ? 1 : 0) +
                    (n == 2 && r != n - 1 ? 1 : 0) + (n == 2 && bytes >= kPairFrom ? 1 : 0);
  return blocks * bytes;
}

class SharedHost : public ::testing::TestWithParam<int> {};

TEST_P(SharedHost, LargeTransfersAreOneCopyOutOfTheSendersAllocation) {
  expectAllRanksOk(runRanks(GetParam(), transportEnv("shm"), [](RankCtx& ctx) {
    ternComm_t comm = ctx.comm(0);
    int fails = 0;
    for (size_t bytes : {kThreshold - 1, kThreshold, kPairFrom, size_t(5 << 20) + 3}) {
      uint64_t got = 0;
      fails += exchange(ctx, comm, bytes, &got);
      const uint64_t want = bytes < kThreshold ? 0 : mappedInto(ctx.rank, ctx.nranks, bytes);
      if (!fails && got != want)
        fails += failf(ctx, "%zu bytes: %llu copied out of peers' mappings, want %llu", bytes,
                       (unsigned long long)got, (unsigned long long)want);
    }
    if (ternCommDestroy(comm) != ternSuccess) ++fails;
    return fails;
  }));
}

INSTANTIATE_TEST_SUITE_P(Shm, SharedHost, ::testing::Values(2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// A 2-rank reduce whose sender's buffer is shared: the root reduces
// straight out of the mapping (the bytes counted there), with every op,
// from either root, in place at the root too; below the threshold and
// above kMappedReduceMax it streams.
int reduceBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  for (size_t count : {kThreshold / 4 - 1, kThreshold / 4, kMappedReduceMax / 4, kMappedReduceMax / 4 + 1,
                       size_t(5 << 18) + 7}) {
    Shared src(count * 4), dst(count * 4);
    auto* in = reinterpret_cast<float*>(src.p);
    auto* out = reinterpret_cast<float*>(dst.p);
    for (ternRedOp_t op : {ternSum, ternMax, ternAvg})
      for (int root = 0; root < 2; ++root)
        for (bool inPlace : {false, true}) {
          for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i % 97) * (ctx.rank + 1));
          float* res = inPlace && ctx.rank == root ? in : out;
          const uint64_t before = ipcBytes();
          if (ternReduce(in, res, count, ternFloat32, op, root, comm, nullptr) != ternSuccess)
            return failf(ctx, "reduce of %zu: %s", count, ternGetLastError(comm));
          const bool mapped = count * 4 >= kThreshold && count * 4 <= kMappedReduceMax;
          const uint64_t got = ipcBytes() - before, want = ctx.rank == root && mapped ? count * 4 : 0;
          if (got != want)
            return failf(ctx, "reduce of %zu floats to %d: %llu bytes reduced out of a mapping, want %llu",
                         count, root, (unsigned long long)got, (unsigned long long)want);
          for (size_t i = 0; ctx.rank == root && i < count; ++i) {
            const float a = static_cast<float>(i % 97), b = 2 * a;
            const float w = op == ternSum ? a + b : op == ternMax ? b : (a + b) / 2;
            if (res[i] != w)
              return failf(ctx, "reduce of %zu, op %d: element %zu is %g, want %g", count, op, i, res[i], w);
          }
        }
  }
  ternCommDestroy(comm);
  return 0;
}

TEST(SharedHostReduce, TheRootReducesStraightOutOfTheSendersAllocation) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), reduceBody));
}

// A 2-rank reduce-scatter out of shared buffers: from kPairFrom-byte blocks
// each rank reduces its block straight out of the other's mapping (the
// bytes counted there: its block, once), with every op, in place (the
// result in the input's own block) too; below it the ring streams.
int reduceScatterBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  const int me = ctx.rank;
  for (size_t count : {kPairFrom / 4 - 1, kPairFrom / 4, size_t(5 << 18) + 7}) {
    Shared src(2 * count * 4), dst(count * 4);
    auto* in = reinterpret_cast<float*>(src.p);
    for (ternRedOp_t op : {ternSum, ternMax, ternAvg})
      for (bool inPlace : {false, true}) {
        for (size_t i = 0; i < 2 * count; ++i) in[i] = static_cast<float>((i % 89) * (me + 1));
        float* res = inPlace ? in + me * count : reinterpret_cast<float*>(dst.p);
        const uint64_t before = ipcBytes();
        if (ternReduceScatter(in, res, count, ternFloat32, op, comm, nullptr) != ternSuccess)
          return failf(ctx, "reduce-scatter of %zu: %s", count, ternGetLastError(comm));
        const uint64_t got = ipcBytes() - before, want = count * 4 >= kPairFrom ? count * 4 : 0;
        if (got != want)
          return failf(ctx,
                       "reduce-scatter of %zu floats a rank: %llu bytes reduced out of a mapping, want %llu",
                       count, (unsigned long long)got, (unsigned long long)want);
        for (size_t i = 0; i < count; ++i) {
          const float a = static_cast<float>((me * count + i) % 89), b = 2 * a;
          const float w = op == ternSum ? a + b : op == ternMax ? b : (a + b) / 2;
          if (res[i] != w)
            return failf(ctx, "reduce-scatter of %zu, op %d, %s: element %zu is %g, want %g", count, op,
                         inPlace ? "in place" : "out of place", i, res[i], w);
        }
      }
  }
  ternCommDestroy(comm);
  return 0;
}

TEST(SharedHostReduceScatter, EachRankReducesStraightOutOfTheOthersAllocation) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), reduceScatterBody));
}

// Two ranks that each name the other as a large reduce's root: each would
// wait for the other to reduce its buffer; the root's descriptor, which
// goes the other way beside the transfer, makes both fail at once with
// ternInvalidUsage, not at the timeout (20 s).
TEST(SharedHostReduce, RanksThatNameDifferentRootsFailAtOnce) {
  twoRanks("20", [](RankCtx& ctx) {
    ternComm_t comm = ctx.comm(0);
    constexpr size_t kCount = 1 << 20;
    Shared src(kCount * 4), dst(kCount * 4);
    auto t0 = std::chrono::steady_clock::now();
    ternResult_t r = ternReduce(src.p, dst.p, kCount, ternFloat32, ternSum, 1 - ctx.rank, comm, nullptr);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r != ternInvalidUsage) return failf(ctx, "got %s, want ternInvalidUsage", ternGetErrorString(r));
    if (s > 5) return failf(ctx, "the mismatch took %.1f s", s);
    return 0;
  });
}

// Mappings of tern-host memfds in this process.
int hostMappings() {
  std::ifstream maps("/proc/self/maps");
  int k = 0;
  for (std::string line; std::getline(maps, line);) k += line.find("memfd:tern-host") != std::string::npos;
  return k;
}

// A sender that allocates a fresh buffer for each of 40 sends and frees it:
// the receiver maps each once and lets the freed ones go.
TEST(SharedHostLifetime, FreedAllocationsAreNotKeptMappedByTheReceiver) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), [](RankCtx& ctx) {
    ternComm_t comm = ctx.comm(0);
    constexpr size_t kBytes = 1 << 20;
    constexpr int kRounds = 40;
    std::vector<uint8_t> got(kBytes);
    const uint64_t before = ipcBytes();
    int most = 0;
    for (int k = 0; k < kRounds; ++k) {
      if (ctx.rank == 1) {
        Shared buf(kBytes);
        memset(buf.p, k + 1, kBytes);
        if (ternSend(buf.p, kBytes, ternUint8, 0, comm, nullptr) != ternSuccess)
          return failf(ctx, "send %d: %s", k, ternGetLastError(comm));
        continue;
      }
      if (ternRecv(got.data(), kBytes, ternUint8, 1, comm, nullptr) != ternSuccess)
        return failf(ctx, "recv %d: %s", k, ternGetLastError(comm));
      if (got[0] != k + 1 || got[kBytes - 1] != k + 1) return failf(ctx, "round %d: got %d", k, got[0]);
      most = std::max(most, hostMappings());
    }
    if (ctx.rank == 0 && ipcBytes() - before != uint64_t(kRounds) * kBytes)
      return failf(ctx, "%llu bytes came out of mappings, want %llu",
                   (unsigned long long)(ipcBytes() - before), (unsigned long long)kRounds * kBytes);
    if (most > 2) return failf(ctx, "%d of the sender's allocations were mapped here at once", most);
    ternCommDestroy(comm);
    return 0;
  }));
}

// A sender that dies while its shared buffer waits to be read: the
// receiver fails within the timeout.
TEST(SharedHostFaults, SenderDiesBeforeItsBufferIsRead) {
  RunResult r = runRanks(
      2, transportEnv("shm", {{"TERN_TIMEOUT", "4"}}),
      [](RankCtx& ctx) {
        ternComm_t comm = ctx.comm(0);
        constexpr size_t kBytes = 16 << 20;
        if (ctx.rank == 1) {
          Shared buf(kBytes);
          std::thread([] {
            usleep(300000);
            raise(SIGKILL);  // while the send waits for the receiver
          }).detach();
          ternSend(buf.p, kBytes, ternUint8, 0, comm, nullptr);
          return failf(ctx, "the send completed although nobody received");
        }
        std::vector<uint8_t> in(kBytes);
        usleep(600000);
        auto t0 = std::chrono::steady_clock::now();
        ternResult_t res = ternRecv(in.data(), kBytes, ternUint8, 1, comm, nullptr);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (res == ternSuccess) return failf(ctx, "the transfer from a dead sender succeeded");
        if (s > 8) return failf(ctx, "the error took %.1f s (TERN_TIMEOUT=4)", s);
        fprintf(stderr, "[rank 0] %s after %.2f s: %s\n", ternGetErrorString(res), s, ternGetLastError(comm));
        return 0;
      },
      1, 60);
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.exitCodes[1], 128 + SIGKILL);
  EXPECT_EQ(r.exitCodes[0], 0);
}

// A sender that aborts while its send is posted gets the buffer back and
// changes it; the receiver, which maps it later, must not take those bytes
// for the message.
TEST(SharedHostFaults, AbortedSenderIsNotReadAsValid) {
  twoRanks("4", [](RankCtx& ctx) {
    ternComm_t comm = ctx.comm(0);
    constexpr size_t kBytes = 16 << 20;
    Shared buf(kBytes);
    memset(buf.p, 1, kBytes);
    if (ctx.rank == 1) {
      ternRequest_t req = nullptr;
      ternGroupStart();
      ternSend(buf.p, kBytes, ternUint8, 0, comm, nullptr);
      if (ternGroupEndAsync(&req) != ternSuccess) return failf(ctx, "async send not issued");
      usleep(200000);  // the progress thread has posted the buffer
      if (ternCommAbort(comm) != ternSuccess) return failf(ctx, "abort failed");
      memset(buf.p, 0xee, kBytes);  // the caller's again
      usleep(1500000);              // alive (mappable) while rank 0 reads
      return 0;
    }
    usleep(500000);
    ternResult_t r = ternRecv(buf.p, kBytes, ternUint8, 1, comm, nullptr);
    if (r == ternSuccess)
      return failf(ctx, "received from an aborted sender as if valid (first byte %d)", buf.p[0]);
    fprintf(stderr, "[rank 0] %s: %s\n", ternGetErrorString(r), ternGetLastError(comm));
    return 0;
  });
}

}  // namespace
