// The rooted collectives' agreement checks heard without waiting
// (Step::deferrable, StreamMarks::owed): a rank that only sends (a broadcast's
// root, a reduce's first rank, a gather's non-roots, a scatter's root)
// returns once its sends are out, checks the descriptor its peer sends back
// when it comes (this call, a later one on the stream, or ternCommDestroy),
// and never runs more than OwedDescs::kMax calls ahead of those checks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "harness.h"

using namespace terntest;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kAhead = 64;  // OwedDescs::kMax (engine/op_desc.h)

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One rooted call of 4 floats per rank, rank 0 the root; value(i) per element.
ternResult_t rooted(const char* kind, ternComm_t comm, int me, int n, std::vector<float>& a,
                    std::vector<float>& b) {
  if (!strcmp(kind, "broadcast")) return ternBroadcast(a.data(), b.data(), 4, ternFloat32, 0, comm, nullptr);
  if (!strcmp(kind, "reduce"))  // the ring's first rank (the root's successor) only sends
    return ternReduce(a.data(), b.data(), 4, ternFloat32, ternSum, 0, comm, nullptr);
  if (!strcmp(kind, "gather")) return ternGather(a.data(), b.data(), 4, ternFloat32, 0, comm, nullptr);
  (void)me, (void)n;
  return ternScatter(a.data(), b.data(), 4, ternFloat32, 0, comm, nullptr);
}

// The rank that only sends in `kind` at 2 ranks (root 0).
int sender(const char* kind) { return !strcmp(kind, "broadcast") || !strcmp(kind, "scatter") ? 0 : 1; }

// The sender makes kAhead calls while its peer sleeps, each returning without
// waiting for the peer; the next one waits (the checks it owes are full) and
// completes once the peer calls.  Every result is checked on the receiver.
int runsAheadBody(RankCtx& ctx, const char* kind) {
  ternComm_t comm = ctx.comm();
  const int me = ctx.rank, n = ctx.nranks;
  std::vector<float> a(4 * n), b(4 * n);
  const double nap = 0.4;
  // Both clocks start together: communicator setup can return ~0.1 s apart
  // (seen under AddressSanitizer with four test processes on 2 cores), and
  // the sender's wait for the peer's nap would read that much short.
  if (ternBarrier(comm) != ternSuccess) return failf(ctx, "barrier: %s", ternGetLastError(comm));
  if (me == sender(kind)) {
    auto t0 = Clock::now();
    for (int k = 0; k < kAhead; ++k) {
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(100 * k + i);
      if (ternResult_t r = rooted(kind, comm, me, n, a, b); r != ternSuccess)
        return failf(ctx, "%s #%d: %s", kind, k, ternGetLastError(comm));
    }
    if (since(t0) > nap / 2) return failf(ctx, "%d %ss waited for the peer (%.3f s)", kAhead, kind, since(t0));
    if (rooted(kind, comm, me, n, a, b) != ternSuccess) return failf(ctx, "%s: %s", kind, ternGetLastError(comm));
    if (since(t0) < nap * 0.8)
      return failf(ctx, "call %d did not wait for its owed checks (%.3f s)", kAhead + 1, since(t0));
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double>(nap));
    for (int k = 0; k <= kAhead; ++k) {
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(100 * std::min(k, kAhead - 1) + i);
      std::fill(b.begin(), b.end(), -1.0f);
      if (rooted(kind, comm, me, n, a, b) != ternSuccess) return failf(ctx, "%s: %s", kind, ternGetLastError(comm));
      const float base = static_cast<float>(100 * std::min(k, kAhead - 1));
      // What the receiving rank got: the sender's buffer (scatter: its
      // block 1; gather: at block 1 of the root's; reduce: the sum).
      for (size_t i = 0; i < 4; ++i) {
        float want = !strcmp(kind, "scatter") ? base + 4 + i : !strcmp(kind, "reduce") ? 2 * (base + i) : base + i;
        float got = !strcmp(kind, "gather") ? b[4 + i] : b[i];
        if (got != want) return failf(ctx, "%s #%d element %zu: %g, want %g", kind, k, i, got, want);
      }
    }
  }
  return ternCommDestroy(comm) == ternSuccess ? 0 : failf(ctx, "destroy: %s", ternGetLastError(nullptr));
}

class RootedChecks : public ::testing::TestWithParam<std::tuple<std::string, const char*>> {};

TEST_P(RootedChecks, TheSenderRunsAheadBoundedAndTheDataIsRight) {
  auto [transport, kind] = GetParam();
  expectAllRanksOk(runRanks(2, transportEnv(transport, {{"TERN_TIMEOUT", "20"}}),
                            [kind = kind](RankCtx& ctx) { return runsAheadBody(ctx, kind); }, 1, 60));
}

INSTANTIATE_TEST_SUITE_P(Kinds, RootedChecks,
                         ::testing::Combine(::testing::Values("shm", "tcp"),
                                            ::testing::Values("broadcast", "reduce", "gather", "scatter")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + std::string("_") + std::get<1>(info.param);
                         });

// Two ranks that both think they are a small broadcast's root both only
// send: neither waits, and each finds the other's data where the check it
// owes should be, at its next call on the stream or, with no next call, at
// ternCommDestroy: ternInvalidUsage naming the roots, never silence.
TEST(RootedChecksMismatch, BothRootsLearnItAtTheNextCallOrAtDestroy) {
  for (bool nextCall : {true, false})
    for (const char* t : {"shm", "tcp"}) {
      SCOPED_TRACE(std::string(t) + (nextCall ? ", next call" : ", destroy"));
      expectAllRanksOk(runRanks(2, transportEnv(t, {{"TERN_TIMEOUT", "20"}}), [&](RankCtx& ctx) {
        ternComm_t comm = ctx.comm();
        std::vector<float> x(4, 1.0f);
        ternResult_t r = ternBroadcast(x.data(), x.data(), 4, ternFloat32, ctx.rank, comm, nullptr);
        if (r == ternSuccess && nextCall) r = ternAllReduce(x.data(), x.data(), 4, ternFloat32, ternSum, comm, nullptr);
        if (r == ternSuccess) {
          r = ternCommDestroy(comm);
          if (r != ternInvalidUsage || !strstr(ternGetLastError(nullptr), "with root"))
            return failf(ctx, "destroy after the mismatch gave %s: %s", ternGetErrorString(r), ternGetLastError(nullptr));
          return 0;
        }
        if (r != ternInvalidUsage || !strstr(ternGetLastError(comm), "with root"))
          return failf(ctx, "mismatch gave %s: %s", ternGetErrorString(r), ternGetLastError(comm));
        ternCommAbort(comm);
        return 0;
      }, 1, 60));
    }
}

// A root that destroys its communicator right after its last broadcast,
// before the receiver has even called: the data still arrives whole (over
// tcp a socket closed with the receiver's descriptor unread would reset the
// connection; destroy hears it first).
TEST(RootedChecksMismatch, ARootThatLeavesAtOnceLosesNothing) {
  for (const char* t : {"shm", "tcp"})
    expectAllRanksOk(runRanks(2, transportEnv(t, {{"TERN_TIMEOUT", "20"}}), [](RankCtx& ctx) {
      ternComm_t comm = ctx.comm();
      std::vector<float> x(64);  // heard without waiting (Transfers::kHearAheadMax)
      for (size_t i = 0; i < x.size(); ++i) x[i] = ctx.rank == 0 ? static_cast<float>(i) : -1.0f;
      if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (ternBroadcast(x.data(), x.data(), x.size(), ternFloat32, 0, comm, nullptr) != ternSuccess)
        return failf(ctx, "broadcast: %s", ternGetLastError(comm));
      for (size_t i = 0; i < x.size(); ++i)
        if (x[i] != static_cast<float>(i)) return failf(ctx, "element %zu is %g", i, x[i]);
      return ternCommDestroy(comm) == ternSuccess ? 0 : failf(ctx, "destroy: %s", ternGetLastError(nullptr));
    }, 1, 60));
}

}  // namespace
