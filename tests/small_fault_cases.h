// A peer that dies, or stays away, while a rank waits in a small
// allreduce: the cases the small-message suites share (test_small_messages
// over the LL stream, test_small_path over the small path).  Two ranks;
// each body runs in both.
#pragma once
#include <unistd.h>

#include <chrono>
#include <functional>
#include <vector>

#include "harness.h"

namespace terntest {

// Called on each rank after the warm-up allreduces: nonzero fails the case
// (a check that the warm-up took the path under test).
using WarmedUp = std::function<int(RankCtx&, ternComm_t)>;

// Rank 1 dies without a word while rank 0 waits: an error, well within
// TERN_TIMEOUT (the control socket closes), not a hang.
inline int deadPeerBody(RankCtx& ctx, const Signal& go, const WarmedUp& warmedUp) {
  ternComm_t comm = ctx.comm();
  std::vector<float> x(4, 1.0f);  // 16 bytes
  for (int k = 0; k < 10; ++k)
    if (ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, ternSum, comm, nullptr) != ternSuccess)
      return failf(ctx, "warm-up failed");
  if (int bad = warmedUp ? warmedUp(ctx, comm) : 0) return bad;
  if (ctx.rank == 1) {
    go.await();
    _exit(0);
  }
  go.post();
  auto t0 = std::chrono::steady_clock::now();
  ternResult_t r = ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, ternSum, comm, nullptr);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r == ternSuccess) return failf(ctx, "the allreduce succeeded without its peer");
  if (secs > 20) return failf(ctx, "the error took %.1f s (TERN_TIMEOUT is 60)", secs);
  ternCommAbort(comm);
  return 0;
}

// Rank 1 stays away: rank 0 times out after TERN_TIMEOUT (1 s) having used
// well under that in CPU (the wait spins briefly, then sleeps).
inline int stalledPeerBody(RankCtx& ctx, const Signal& done) {
  ternComm_t comm = ctx.comm();
  std::vector<float> x(4, 1.0f);
  if (ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, ternSum, comm, nullptr) != ternSuccess)
    return failf(ctx, "warm-up failed");
  if (ctx.rank == 1) {
    done.await();  // until rank 0 has its answer; then leave without a call
    _exit(0);
  }
  const double cpu0 = cpuSeconds();
  auto t0 = std::chrono::steady_clock::now();
  ternResult_t r = ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, ternSum, comm, nullptr);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpuSeconds() - cpu0;
  done.post();
  if (r != ternTimeout) return failf(ctx, "got %s: %s", ternGetErrorString(r), ternGetLastError(comm));
  if (wall < 0.95 || wall > 20) return failf(ctx, "timed out after %.2f s (TERN_TIMEOUT=1)", wall);
  if (cpu > 0.5 * wall) return failf(ctx, "used %.2f s of CPU in %.2f s of waiting", cpu, wall);
  ternCommAbort(comm);
  return 0;
}

}  // namespace terntest
