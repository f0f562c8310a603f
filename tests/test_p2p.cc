// Send/recv and groups over real processes: all-to-all exchanges posted in
// the "wrong" order inside one group (receives first), messages far larger
// than the fifos, several messages to one peer (order kept), self send/recv,
// nested groups, collectives in a group, and barrier semantics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "harness.h"

using namespace terntest;

namespace {

uint32_t word(int from, int to, int msg, size_t i) {
  return static_cast<uint32_t>(from * 1000003u + to * 7919u + msg * 104729u + i);
}

int p2pBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  const int n = ctx.nranks, me = ctx.rank;
  const size_t count = 300001;  // ~1.2 MB per message, much larger than the 16 KiB fifo
  int fails = 0;

  // All-to-all, two messages per pair, receives posted before sends.
  std::vector<std::vector<uint32_t>> out(2 * n), in(2 * n);
  for (int p = 0; p < n; ++p)
    for (int m = 0; m < 2; ++m) {
      out[2 * p + m].resize(count + m);
      in[2 * p + m].assign(count + m, 0);
      for (size_t i = 0; i < count + m; ++i) out[2 * p + m][i] = word(me, p, m, i);
    }
  ternGroupStart();
  for (int p = 0; p < n; ++p)
    for (int m = 0; m < 2; ++m)
      ternRecv(in[2 * p + m].data(), count + m, ternUint32, p, comm, nullptr);
  ternGroupStart();  // nested: only the outermost end launches
  for (int p = n - 1; p >= 0; --p)
    for (int m = 0; m < 2; ++m)
      ternSend(out[2 * p + m].data(), count + m, ternUint32, p, comm, nullptr);
  if (ternGroupEnd() != ternSuccess) fails += failf(ctx, "inner ternGroupEnd failed");
  if (ternGroupEnd() != ternSuccess)
    fails += failf(ctx, "ternGroupEnd failed: %s", ternGetLastError(comm));
  for (int p = 0; p < n; ++p)
    for (int m = 0; m < 2; ++m)
      for (size_t i = 0; i < count + m; ++i)
        if (in[2 * p + m][i] != word(p, me, m, i)) {
          fails += failf(ctx, "message %d from rank %d wrong at %zu", m, p, i);
          break;
        }

  // Blocking pair outside a group: even ranks send first, odd ranks receive first.
  if (n >= 2 && me < (n / 2) * 2) {
    int peer = me ^ 1;
    std::vector<uint32_t> a(1000, me), b(1000, 99);
    ternResult_t r1, r2;
    if (me % 2 == 0) {
      r1 = ternSend(a.data(), a.size(), ternUint32, peer, comm, nullptr);
      r2 = ternRecv(b.data(), b.size(), ternUint32, peer, comm, nullptr);
    } else {
      r1 = ternRecv(b.data(), b.size(), ternUint32, peer, comm, nullptr);
      r2 = ternSend(a.data(), a.size(), ternUint32, peer, comm, nullptr);
    }
    if (r1 || r2 || b[0] != static_cast<uint32_t>(peer) || b[999] != static_cast<uint32_t>(peer))
      fails += failf(ctx, "blocking send/recv pair with rank %d failed", peer);
  }

  // Two collectives inside one group run in call order.
  std::vector<float> x(5000, 1.0f), y(5000, 2.0f);
  ternGroupStart();
  ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, ternSum, comm, nullptr);
  ternAllReduce(y.data(), y.data(), y.size(), ternFloat32, ternMax, comm, nullptr);
  if (ternGroupEnd() != ternSuccess || x[4999] != n || y[0] != 2.0f)
    fails += failf(ctx, "collectives in a group gave %g %g", x[4999], y[0]);

  // Barrier: nobody leaves before the last rank arrives.
  auto t0 = std::chrono::steady_clock::now();
  if (me == n - 1) usleep(300000);
  if (ternBarrier(comm) != ternSuccess) fails += failf(ctx, "ternBarrier failed");
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (waited < 0.25) fails += failf(ctx, "left the barrier after %.3f s, before the late rank", waited);

  if (ternCommDestroy(comm) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails ? 1 : 0;
}

class P2P : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(P2P, GroupsNeverDeadlock) {
  auto [transport, nranks] = GetParam();
  expectAllRanksOk(runRanks(nranks,
                         transportEnv(transport, {{"TERN_TIMEOUT", "30"},
                                                  {"TERN_BUFFSIZE", "16384"},
                                                  {"TERN_CHUNKSIZE", "4096"}}),
                         p2pBody, 1, 120));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, P2P,
    ::testing::Combine(::testing::ValuesIn(testTransports()), ::testing::Values(1, 2, 3, 4)),
    [](const auto& info) { return transportRanksName(info); });

}  // namespace
