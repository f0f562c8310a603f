// Failure handling with real processes: a rank SIGKILLed mid-allreduce, a
// rank that stalls, and strangers who try to join without the job secret.
// Survivors must get ternRemoteError or ternTimeout within TERN_TIMEOUT, and
// abort + destroy must then return promptly.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "harness.h"

using namespace terntest;

namespace {

constexpr double kTimeout = 4;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Survivors loop on allreduce until it fails, then check how and how fast.
int survive(RankCtx& ctx, ternComm_t comm, std::vector<float>& buf) {
  auto t0 = std::chrono::steady_clock::now();
  ternResult_t r = ternSuccess;
  for (int i = 0; i < 100000 && r == ternSuccess; ++i)
    r = ternAllReduce(buf.data(), buf.data(), buf.size(), ternFloat32, ternSum, comm, nullptr);
  double failedAfter = since(t0);
  if (r != ternRemoteError && r != ternTimeout)
    return failf(ctx, "allreduce returned %s, not a remote error or timeout", ternGetErrorString(r));
  if (failedAfter > kTimeout + 3)
    return failf(ctx, "took %.1f s to notice the dead peer (TERN_TIMEOUT=%g)", failedAfter, kTimeout);
  if (strlen(ternGetLastError(comm)) == 0) return failf(ctx, "no error message");
  ternResult_t async = ternSuccess;
  if (ternCommGetAsyncError(comm, &async) != ternSuccess || async == ternSuccess)
    return failf(ctx, "ternCommGetAsyncError did not report the failure");
  // A later call fails at once instead of hanging.
  auto t1 = std::chrono::steady_clock::now();
  if (ternAllReduce(buf.data(), buf.data(), 16, ternFloat32, ternSum, comm, nullptr) == ternSuccess)
    return failf(ctx, "a call on the failed communicator succeeded");
  auto t2 = std::chrono::steady_clock::now();
  if (ternCommAbort(comm) != ternSuccess) return failf(ctx, "ternCommAbort failed");
  if (std::chrono::duration<double>(t2 - t1).count() > 1 || since(t2) > 2)
    return failf(ctx, "calls after the failure were slow");
  fprintf(stderr, "[rank %d] failed after %.2f s with %s: %s\n", ctx.rank, failedAfter,
          ternGetErrorString(r), "ok");
  return 0;
}

int killedBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  std::vector<float> buf(1 << 20, 1.0f);  // 4 MiB: the kill lands mid-operation
  if (ctx.rank == 1) {
    std::thread([] {
      usleep(300000);
      raise(SIGKILL);
    }).detach();
    for (;;) ternAllReduce(buf.data(), buf.data(), buf.size(), ternFloat32, ternSum, comm, nullptr);
  }
  return survive(ctx, comm, buf);
}

int stalledBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  std::vector<float> buf(1 << 16, 1.0f);
  if (ctx.rank == 1) {  // alive, connected, but never joins the collective
    sleep(static_cast<unsigned>(kTimeout) + 4);
    _exit(0);
  }
  return survive(ctx, comm, buf);
}

// Non-roots leave right after their part of a reduce (and close their
// sockets) while the root is still draining what they sent: not an error.
int earlyExitBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  std::vector<int> buf(1 << 20, ctx.rank + 1), out(1 << 20, 0);
  if (ctx.rank != 0) usleep(ctx.rank * 50000);  // the root starts first and waits
  ternResult_t r = ternReduce(buf.data(), out.data(), buf.size(), ternInt32, ternSum, 0, comm, nullptr);
  if (r != ternSuccess) return failf(ctx, "reduce failed: %s", ternGetLastError(comm));
  if (ctx.rank != 0) _exit(0);  // no destroy, no goodbye
  int want = ctx.nranks * (ctx.nranks + 1) / 2;
  if (out[0] != want || out.back() != want) return failf(ctx, "root got %d, want %d", out[0], want);
  return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
}

// ternCommAbort from another thread while this one is blocked in a call on
// the same communicator (a watchdog's abort): the blocked call returns an
// error, and the communicator is not freed under it (it used to be: a
// SIGSEGV in about 1 run in 4).  Five rounds, five communicators.
int abortWhileBlockedBody(RankCtx& ctx) {
  for (int round = 0; round < 5; ++round) {
    ternComm_t comm = ctx.comm(round);
    std::vector<float> buf(1 << 16, 1.0f);
    if (ctx.rank == 1) {
      std::thread watchdog([comm] {
        usleep(100000);
        ternCommAbort(comm);
      });
      ternResult_t r = ternRecv(buf.data(), buf.size(), ternFloat32, 0, comm, nullptr);
      watchdog.join();
      if (r == ternSuccess) return failf(ctx, "round %d: the receive succeeded after abort", round);
    } else {
      usleep(300000);  // rank 1 aborts meanwhile: nothing is sent
      ternCommAbort(comm);
    }
  }
  return 0;
}

TEST(FaultsAbort, AbortFromAnotherThreadWhileBlocked) {
  expectAllRanksOk(runRanks(2, {{"TERN_TIMEOUT", "10"}}, abortWhileBlockedBody, 5, 60));
}

class Faults : public ::testing::TestWithParam<std::string> {};

// Not instantiated for UCX, a known limitation rather than a pass: a peer
// that _exit()s right after its last send can take undelivered stream data
// with it (UCX's peer-failure handling drops it; an endpoint flush before
// completing the call does not prevent it), so survivors may fail.  Seen
// often over UCX's tcp transport and rarely (under load) over its shared
// memory.  Open in issue 4.
class EarlyExit : public ::testing::TestWithParam<std::string> {};

TEST_P(EarlyExit, PeersExitingAfterTheirPartIsNotAnError) {
  expectAllRanksOk(runRanks(3, transportEnv(GetParam(), {{"TERN_BUFFSIZE", "65536"},
                                                      {"TERN_CHUNKSIZE", "16384"}}),
                         earlyExitBody, 1, 60));
}

std::vector<std::string> transportsButUcx() {
  std::vector<std::string> t = testTransports();
  t.erase(std::remove_if(t.begin(), t.end(),
                         [](const std::string& x) { return x.rfind("ucx", 0) == 0; }),
          t.end());
  return t;
}

INSTANTIATE_TEST_SUITE_P(Transports, EarlyExit, ::testing::ValuesIn(transportsButUcx()),
                         [](const auto& info) { return testName(info.param); });

TEST_P(Faults, KilledRankMidAllreduce) {
  RunResult r = runRanks(3, transportEnv(GetParam(), {{"TERN_TIMEOUT", "4"}}), killedBody, 1, 60);
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.exitCodes[1], 128 + SIGKILL);
  EXPECT_EQ(r.exitCodes[0], 0);
  EXPECT_EQ(r.exitCodes[2], 0);
}

TEST_P(Faults, StalledRankTimesOut) {
  expectAllRanksOk(runRanks(3, transportEnv(GetParam(), {{"TERN_TIMEOUT", "4"}}), stalledBody, 1, 60));
}

INSTANTIATE_TEST_SUITE_P(Transports, Faults, ::testing::ValuesIn(testTransports()),
                         [](const auto& info) { return testName(info.param); });

// The root's address inside a unique id (layout of bootstrap.cc's WireId).
sockaddr_in6 rootOf(const ternUniqueId& id) {
  sockaddr_in6 a;
  memcpy(&a, id.internal + 24, sizeof a);
  return a;
}

// Rank 2 of the harness is a stranger: it tries to join as rank 1 with a
// forged secret, then connects raw and sends junk.  The real ranks 0 and 1
// must still form their 2-rank communicator and compute correctly.
// Rank 0 says (a byte on this pipe, made before the ranks fork) once its
// stderr goes to the capture file: a stranger that came first was logged to
// the terminal, and the count came out one short (CI, 1 run in many).
Signal strangerGo;

int strangerBody(RankCtx& ctx) {
  if (ctx.rank == 2) {
    if (!strangerGo.await()) return failf(ctx, "rank 0 never said go");
    ternUniqueId forged = ctx.ids[0];
    forged.internal[8] ^= 0x5a;  // first byte of the secret
    ternComm_t c;
    ternResult_t r = ternCommInitRank(&c, 2, forged, 1);
    if (r == ternSuccess) return failf(ctx, "a stranger with a forged secret joined");
    sockaddr_in6 root = rootOf(ctx.ids[0]);
    int fd = socket(root.sin6_family, SOCK_STREAM, 0);
    socklen_t len = root.sin6_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (connect(fd, reinterpret_cast<sockaddr*>(&root), len) == 0) {
      char junk[256];
      memset(junk, 0x42, sizeof junk);
      (void)!write(fd, junk, sizeof junk);
      char b;
      (void)!read(fd, &b, 1);  // the root hangs up on us
    }
    close(fd);
    fprintf(stderr, "[stranger] rejected: %s\n", ternGetErrorString(r));
    return 0;
  }
  // Rank 0 hosts the root (it made the id): capture what the root logs.
  char logPath[] = "/tmp/tern-stranger-XXXXXX";
  int logFd = ctx.rank == 0 ? mkstemp(logPath) : -1;
  if (ctx.rank == 0) {
    dup2(logFd, 2);
    strangerGo.post();
  }
  if (ctx.rank == 1) usleep(700000);  // let the stranger try first
  ternComm_t comm;
  if (ternCommInitRank(&comm, 2, ctx.ids[0], ctx.rank) != ternSuccess)
    return failf(ctx, "real rank could not join: %s", ternGetLastError(nullptr));
  int x = ctx.rank + 1;
  if (ternAllReduce(&x, &x, 1, ternInt32, ternSum, comm, nullptr) != ternSuccess || x != 3)
    return failf(ctx, "allreduce after the stranger gave %d", x);
  ternCommDestroy(comm);
  if (ctx.rank == 0) {
    char log[8192] = {};
    (void)!pread(logFd, log, sizeof log - 1, 0);
    unlink(logPath);
    // Rejections from one address are logged once, then counted ("rejected
    // 1 connection from ... in the last 0 s") when the listener closes.
    long rejected = 0;
    for (const char* p = log; (p = strstr(p, "rejected ")); ++p) {
      if (strncmp(p + 9, "a connection", 12) == 0) ++rejected;
      else rejected += strtol(p + 9, nullptr, 10);
    }
    if (rejected < 2) {
      fprintf(stdout, "root logged %ld rejections, want 2:\n%s\n", rejected, log);  // stderr is the log
      return failf(ctx, "root logged %ld rejections, want 2", rejected);
    }
  }
  return 0;
}

TEST(Security, StrangerWithoutSecretIsRejected) {
  expectAllRanksOk(runRanks(3, {{"TERN_TIMEOUT", "20"}}, strangerBody, 1, 60));
}

}  // namespace
