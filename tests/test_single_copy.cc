// Single-copy shared memory (TERN_SHM_DIRECT, off by default): large send/recv, all-to-all,
// gather and scatter blocks, and a 2-rank broadcast and allgather, between ranks on one host are read
// straight out of the sender's buffer.  Checked here: the data is right on both sides of the threshold, the
// transfers really went single copy (the receiver's TRACE line), ranks that disagree on the setting fall back
// to the fifo together, and a peer that dies while its buffer is posted or before it is read, or fails and
// takes its buffer back, is an error within the timeout on the survivor, not a hang and not a silently wrong
// message.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace terntest;

namespace {

constexpr size_t kThreshold = 65536;

uint8_t byteOf(int from, int to, size_t i) { return static_cast<uint8_t>(from * 31 + to * 7 + i % 251); }

// Sends `bytes` to every other rank and receives as much from each, in one
// group; then an all-to-all of `bytes` per block.  Returns failures.
int exchange(RankCtx& ctx, ternComm_t comm, size_t bytes) {
  const int n = ctx.nranks, me = ctx.rank;
  std::vector<std::vector<uint8_t>> out(n), in(n);
  ternGroupStart();
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    out[p].resize(bytes);
    in[p].assign(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) out[p][i] = byteOf(me, p, i);
    ternRecv(in[p].data(), bytes, ternUint8, p, comm, nullptr);
    ternSend(out[p].data(), bytes, ternUint8, p, comm, nullptr);
  }
  if (ternGroupEnd() != ternSuccess)
    return failf(ctx, "send/recv of %zu bytes failed: %s", bytes, ternGetLastError(comm));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; p != me && i < bytes; ++i)
      if (in[p][i] != byteOf(p, me, i))
        return failf(ctx, "%zu bytes from rank %d: byte %zu is %d", bytes, p, i, in[p][i]);
  std::vector<uint8_t> all(bytes * n), got(bytes * n, 0);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < bytes; ++i) all[p * bytes + i] = byteOf(me, p, i);
  if (ternAllToAll(all.data(), got.data(), bytes, ternUint8, comm, nullptr) != ternSuccess)
    return failf(ctx, "all-to-all of %zu bytes failed: %s", bytes, ternGetLastError(comm));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < bytes; ++i)
      if (got[p * bytes + i] != byteOf(p, me, i))
        return failf(ctx, "all-to-all %zu bytes: block %d byte %zu is %d", bytes, p, i,
                     got[p * bytes + i]);
  // Gather to rank 0 (its blocks from everyone), scatter from the last rank.
  std::fill(got.begin(), got.end(), 0);
  if (ternGather(all.data() + me * bytes, got.data(), bytes, ternUint8, 0, comm, nullptr) != ternSuccess)
    return failf(ctx, "gather of %zu bytes failed: %s", bytes, ternGetLastError(comm));
  for (int p = 0; me == 0 && p < n; ++p)
    for (size_t i = 0; i < bytes; ++i)
      if (got[p * bytes + i] != byteOf(p, p, i))
        return failf(ctx, "gather %zu bytes: block %d byte %zu is %d", bytes, p, i, got[p * bytes + i]);
  // A broadcast from the last rank, out of place (single copy at 2 ranks).
  std::vector<uint8_t> bc(bytes, 0);
  if (ternBroadcast(all.data(), bc.data(), bytes, ternUint8, n - 1, comm, nullptr) != ternSuccess)
    return failf(ctx, "broadcast of %zu bytes failed: %s", bytes, ternGetLastError(comm));
  for (size_t i = 0; i < bytes; ++i)
    if (bc[i] != byteOf(n - 1, 0, i)) return failf(ctx, "broadcast %zu bytes: byte %zu is %d", bytes, i, bc[i]);
  // An allgather, in place (at 2 ranks from 256 KiB blocks a pair of
  // transfers that may go single copy; else a ring through the fifo).
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < bytes; ++i) got[p * bytes + i] = p == me ? byteOf(me, me, i) : 0;
  if (ternAllGather(got.data() + me * bytes, got.data(), bytes, ternUint8, comm, nullptr) != ternSuccess)
    return failf(ctx, "allgather of %zu bytes failed: %s", bytes, ternGetLastError(comm));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < bytes; ++i)
      if (got[p * bytes + i] != byteOf(p, p, i))
        return failf(ctx, "allgather %zu bytes: block %d byte %zu is %d", bytes, p, i, got[p * bytes + i]);
  std::vector<uint8_t> mine(bytes, 0);
  if (ternScatter(all.data(), mine.data(), bytes, ternUint8, n - 1, comm, nullptr) != ternSuccess)
    return failf(ctx, "scatter of %zu bytes failed: %s", bytes, ternGetLastError(comm));
  for (size_t i = 0; i < bytes; ++i)
    if (mine[i] != byteOf(n - 1, me, i))
      return failf(ctx, "scatter %zu bytes: byte %zu is %d", bytes, i, mine[i]);
  return 0;
}

// The transfers `exchange` makes into rank r over single copy, per size at
// or above the threshold, when only ranks in `on` take part in it: a send
// and an all-to-all block from each peer, the gather's blocks at rank 0, the
// scatter's block from the last rank; at 2 ranks the broadcast too (a ring
// of more forwards on the way).
long directReads(int r, int n, bool zeroOff) {
  auto on = [&](int a, int b) { return !(zeroOff && (a == 0 || b == 0)); };
  long k = 0;
  for (int p = 0; p < n; ++p)
    if (p != r && on(p, r)) k += 2 + (r == 0 ? 1 : 0) + (p == n - 1 ? 1 : 0) + (n == 2 && p == n - 1 ? 1 : 0);
  return k;
}

// The two sizes at or above the threshold: directReads() each, and at 2
// ranks the allgather's block at the larger (a pair of transfers from
// 256 KiB blocks, collectives/allgather.cc; a ring below).
long directReadsBothSizes(int r, int n, bool zeroOff) {
  const bool pairOn = n == 2 && !zeroOff;
  return 2 * directReads(r, n, zeroOff) + (pairOn ? 1 : 0);
}

// Runs `exchange` at sizes around the threshold with this rank's log in a
// file; returns how many transfers the log says went single copy (-1 on
// failure).
long exchangeCountingDirect(RankCtx& ctx) {
  char path[] = "/tmp/tern-single-copy-XXXXXX";
  int fd = mkstemp(path);
  dup2(fd, 2);
  ternComm_t comm = ctx.comm(0);
  int fails = 0;
  for (size_t bytes : {kThreshold - 1, kThreshold, size_t(5 << 20) + 3}) fails += exchange(ctx, comm, bytes);
  if (ternCommDestroy(comm) != ternSuccess) ++fails;
  std::string log;
  char buf[4096];
  ssize_t k;
  for (off_t at = 0; (k = pread(fd, buf, sizeof buf, at)) > 0; at += k) log.append(buf, k);
  close(fd);
  unlink(path);
  if (fails) return -1;
  long direct = 0;
  for (size_t at = 0; (at = log.find("directly (single copy)", at)) != std::string::npos; ++at) ++direct;
  return direct;
}

class SingleCopy : public ::testing::TestWithParam<int> {};

// Two sizes at or above the threshold, each: directReads() per rank.
TEST_P(SingleCopy, LargeTransfersAreReadStraightFromTheSender) {
  const int n = GetParam();
  expectAllRanksOk(runRanks(n, transportEnv("shm", {{"TERN_SHM_DIRECT", std::to_string(kThreshold)},
                                                    {"TERN_DEBUG", "TRACE"}}),
                            [](RankCtx& ctx) {
                              long direct = exchangeCountingDirect(ctx);
                              long want = directReadsBothSizes(ctx.rank, ctx.nranks, false);
                              if (direct != want)
                                return failf(ctx, "%ld single-copy reads logged, want %ld", direct, want);
                              return 0;
                            }));
}

// Rank 0 turns single copy off: both ends of every connection to it then use
// the fifo (the setting is agreed per connection), and the data is the same.
TEST_P(SingleCopy, RanksThatDisagreeFallBackToTheFifoTogether) {
  const int n = GetParam();
  expectAllRanksOk(runRanks(n, transportEnv("shm", {{"TERN_SHM_DIRECT", std::to_string(kThreshold)},
                                                    {"TERN_DEBUG", "TRACE"}}),
                            [](RankCtx& ctx) {
                              if (ctx.rank == 0) setenv("TERN_SHM_DIRECT", "0", 1);
                              long direct = exchangeCountingDirect(ctx);
                              // Only pairs of ranks other than 0 go single copy.
                              long want = directReadsBothSizes(ctx.rank, ctx.nranks, true);
                              if (direct != want)
                                return failf(ctx, "%ld single-copy reads logged, want %ld", direct, want);
                              return 0;
                            }));
}

// Two ranks that both think they are a large broadcast's root: each would
// wait for the other to read its buffer; the descriptors that go the other
// way beside the transfer (collectives/broadcast.cc) make both fail with
// ternInvalidUsage naming the roots at once, not at the timeout (20 s).
TEST(SingleCopyBroadcast, RanksThatBothThinkTheyAreTheRootFailAtOnce) {
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_SHM_DIRECT", std::to_string(kThreshold)},
                                                    {"TERN_TIMEOUT", "20"}}),
                            [](RankCtx& ctx) {
                              ternComm_t comm = ctx.comm(0);
                              std::vector<uint8_t> a(1 << 20, 1), b(1 << 20);
                              auto t0 = std::chrono::steady_clock::now();
                              ternResult_t r = ternBroadcast(a.data(), b.data(), a.size(), ternUint8,
                                                             ctx.rank, comm, nullptr);
                              double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                              if (r != ternInvalidUsage || !strstr(ternGetLastError(comm), "root"))
                                return failf(ctx, "root mismatch gave %s: %s", ternGetErrorString(r),
                                             ternGetLastError(comm));
                              if (s > 5) return failf(ctx, "the mismatch took %.1f s to show", s);
                              ternCommAbort(comm);
                              return 0;
                            }, 1, 60));
}

// Voluntary context switches of this process's thread named `name` so far
// (-1 if there is none).
long switchesOf(const char* name) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  long n = -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string dir = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(dir + "/comm");
    std::string who;
    if (!std::getline(comm, who) || who != name) continue;
    std::ifstream status(dir + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) n = std::stol(line.substr(24));
  }
  closedir(d);
  return n;
}

// A group's send that goes single copy ends after its receive (the peer
// reads the buffer while this rank reads the peer's): the caller, which
// waits for the receive first, keeps the drive token for the send instead
// of handing it to the progress thread and asking for it back, which
// switched threads twice per call (perf/RESULTS.md, 2026-12-06: the fast
// phase against 1937317, small messages packed, a group keeps the drive
// token, and what is left short).
TEST(SingleCopyGroup, TheCallerDrivesItsWholeGroupWithoutWakingTheProgressThread) {
  expectAllRanksOk(
      runRanks(2, transportEnv("shm", {{"TERN_SHM_DIRECT", std::to_string(kThreshold)}}), [](RankCtx& ctx) {
        ternComm_t comm = ctx.comm(0);
        const int peer = 1 - ctx.rank, calls = 200;
        std::vector<uint8_t> out(256 << 10, uint8_t(ctx.rank + 1)), in(out.size());
        auto once = [&] {
          ternGroupStart();
          ternSend(out.data(), out.size(), ternUint8, peer, comm, nullptr);
          ternRecv(in.data(), in.size(), ternUint8, peer, comm, nullptr);
          return ternGroupEnd();
        };
        for (int i = 0; i < 10; ++i)
          if (once() != ternSuccess) return failf(ctx, "%s", ternGetLastError(comm));
        const long before = switchesOf("tern-progress");
        for (int i = 0; i < calls; ++i)
          if (once() != ternSuccess) return failf(ctx, "%s", ternGetLastError(comm));
        const long woken = switchesOf("tern-progress") - before;
        if (before < 0) return failf(ctx, "no tern-progress thread found");
        if (in[0] != peer + 1 || in.back() != peer + 1)
          return failf(ctx, "received %d, want %d", in[0], peer + 1);
        // Its timed naps may end a few times in the run; a hand-back
        // per call woke it ~once per call.
        if (woken > calls / 4)
          return failf(ctx, "the progress thread switched in %ld times in %d calls", woken, calls);
        ternCommDestroy(comm);
        return 0;
      }));
}

INSTANTIATE_TEST_SUITE_P(Shm, SingleCopy, ::testing::Values(2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// A sender whose buffer is posted waits for the receiver; if the receiver
// dies instead, the sender fails within the timeout.  And a receiver whose
// sender died after posting fails too (its buffer cannot be read any more).
int deadPeerBody(RankCtx& ctx, bool receiverDies) {
  ternComm_t comm = ctx.comm(0);
  std::vector<float> buf(4 << 20, 1.0f);  // 16 MiB
  const int victim = receiverDies ? 0 : 1;
  if (ctx.rank == victim) {
    if (!receiverDies) {
      std::thread([] {
        usleep(300000);
        raise(SIGKILL);  // while the send waits for the receiver
      }).detach();
      ternSend(buf.data(), buf.size(), ternFloat32, 0, comm, nullptr);
      return failf(ctx, "the send completed although nobody received");
    }
    usleep(300000);  // the sender has posted its buffer by now
    raise(SIGKILL);
  }
  auto t0 = std::chrono::steady_clock::now();
  ternResult_t r = receiverDies
                       ? ternSend(buf.data(), buf.size(), ternFloat32, 0, comm, nullptr)
                       : (usleep(600000), ternRecv(buf.data(), buf.size(), ternFloat32, 1, comm, nullptr));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r == ternSuccess) return failf(ctx, "the transfer with a dead peer succeeded");
  if (s > 8) return failf(ctx, "the error took %.1f s (TERN_TIMEOUT=4)", s);
  fprintf(stderr, "[rank %d] %s after %.2f s: %s\n", ctx.rank, ternGetErrorString(r), s,
          ternGetLastError(comm));
  return 0;
}

void expectSurvivorFails(bool receiverDies) {
  RunResult r = runRanks(2, transportEnv("shm", {{"TERN_TIMEOUT", "4"}, {"TERN_SHM_DIRECT", "65536"}}),
                         [&](RankCtx& ctx) { return deadPeerBody(ctx, receiverDies); }, 1, 60);
  const int victim = receiverDies ? 0 : 1;
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.exitCodes[victim], 128 + SIGKILL);
  EXPECT_EQ(r.exitCodes[1 - victim], 0);
}

// A sender that fails (here: aborts while its send is in flight) gets its
// buffer back; its caller may change it at once.  The receiver, which reads
// later, must not take those bytes for the message.
int abortedSenderBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  std::vector<float> buf(4 << 20, 1.0f);
  if (ctx.rank == 1) {
    ternRequest_t req = nullptr;
    ternGroupStart();
    ternSend(buf.data(), buf.size(), ternFloat32, 0, comm, nullptr);
    if (ternGroupEndAsync(&req) != ternSuccess) return failf(ctx, "async send not issued");
    usleep(200000);  // the progress thread has posted the buffer
    if (ternCommAbort(comm) != ternSuccess) return failf(ctx, "abort failed");  // completes the request
    std::fill(buf.begin(), buf.end(), -1.0f);  // the caller's again
    usleep(1500000);  // alive (readable) while rank 0 reads
    return 0;
  }
  usleep(500000);
  ternResult_t r = ternRecv(buf.data(), buf.size(), ternFloat32, 1, comm, nullptr);
  if (r == ternSuccess)
    return failf(ctx, "received from an aborted sender as if valid (first value %g)", buf[0]);
  fprintf(stderr, "[rank 0] %s: %s\n", ternGetErrorString(r), ternGetLastError(comm));
  return 0;
}

TEST(SingleCopyFaults, AbortedSenderIsNotReadAsValid) {
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_TIMEOUT", "4"}, {"TERN_SHM_DIRECT", "65536"}}),
                            abortedSenderBody, 1, 60));
}

TEST(SingleCopyFaults, ReceiverDiesWhileTheSenderWaits) { expectSurvivorFails(true); }
TEST(SingleCopyFaults, SenderDiesBeforeItsBufferIsRead) { expectSurvivorFails(false); }

}  // namespace
