// Send/recv and groups over real processes: all-to-all exchanges posted in
// the "wrong" order inside one group (receives first), messages far larger
// than the fifos, several messages to one peer (order kept), self send/recv,
// nested groups, collectives in a group, barrier semantics, and receives
// from any source.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
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

// Receives from any source (ternRecvAnySource): every other rank sends rank 0
// two messages; rank 0 takes them in whatever order they come, and each
// sender's two arrive in its order.  Then a receive from rank 1 issued before
// an any-source one in a group leaves rank 1's send to it, so the any-source
// one takes rank 2's; then the same at another priority level as an async
// request; then bad arguments.
int anySourceBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  const int n = ctx.nranks, me = ctx.rank;
  const size_t count = 70001;  // larger than the fifos: the payload streams
  int fails = 0;
  std::vector<uint32_t> buf(count);
  auto fill = [&](int m) {
    for (size_t i = 0; i < count; ++i) buf[i] = word(me, 0, m, i);
  };
  auto matches = [&](const std::vector<uint32_t>& b, int from, int m) {
    for (size_t i = 0; i < count; i += 997)
      if (b[i] != word(from, 0, m, i)) return false;
    return b[count - 1] == word(from, 0, m, count - 1);
  };
  if (me == 0) {
    std::vector<int> next(n, 0);  // the message each sender is expected to deliver next
    for (int k = 0; k < 2 * (n - 1); ++k) {
      int src = -7;
      std::fill(buf.begin(), buf.end(), 0);
      if (ternRecvAnySource(buf.data(), count, ternUint32, &src, comm, nullptr) != ternSuccess)
        return failf(ctx, "ternRecvAnySource failed: %s", ternGetLastError(comm));
      if (src < 1 || src >= n || next[src] > 1 || !matches(buf, src, next[src]))
        return failf(ctx, "any-source receive %d: source %d, data of message %d wrong", k, src,
                     src >= 1 && src < n ? next[src] : -1);
      ++next[src];
    }
  } else {
    for (int m = 0; m < 2; ++m) {
      fill(m);
      if (ternSend(buf.data(), count, ternUint32, 0, comm, nullptr) != ternSuccess)
        return failf(ctx, "send %d failed: %s", m, ternGetLastError(comm));
    }
  }
  if (n >= 3 && me < 3) {
    ternSetPriority(2);
    if (me == 0) {
      std::vector<uint32_t> from1(count, 0);
      int src = -7;
      ternRequest_t req = nullptr;
      ternGroupStart();
      ternRecv(from1.data(), count, ternUint32, 1, comm, nullptr);
      ternRecvAnySource(buf.data(), count, ternUint32, &src, comm, nullptr);
      if (ternGroupEndAsync(&req) != ternSuccess || ternRequestWait(req) != ternSuccess)
        return failf(ctx, "group of recv + any-source recv failed: %s", ternGetLastError(comm));
      if (src != 2 || !matches(buf, 2, 5) || !matches(from1, 1, 5))
        fails += failf(ctx, "any-source receive after a receive from 1 took rank %d's send", src);
    } else {
      if (me == 2) usleep(100000);  // rank 1's send comes first, while the any-source one waits
      fill(5);
      if (ternSend(buf.data(), count, ternUint32, 0, comm, nullptr) != ternSuccess)
        return failf(ctx, "level-2 send failed: %s", ternGetLastError(comm));
    }
    ternSetPriority(TERN_PRIORITY_DEFAULT);
  }
  int src;
  if (ternRecvAnySource(buf.data(), count, ternUint32, nullptr, comm, nullptr) != ternInvalidArgument ||
      std::string(ternGetLastError(comm)).find("source is NULL") == std::string::npos)
    fails += failf(ctx, "a NULL source was not refused: %s", ternGetLastError(comm));
  if (ternRecvAnySource(buf.data(), count, ternUint32, &src, nullptr, nullptr) == ternSuccess)
    fails += failf(ctx, "a NULL comm was not refused");
  if (ternBarrier(comm) != ternSuccess) fails += failf(ctx, "barrier after any-source receives failed");
  if (ternCommDestroy(comm) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails ? 1 : 0;
}

TEST_P(P2P, ReceiveFromAnySource) {
  auto [transport, nranks] = GetParam();
  if (nranks < 2) {  // one rank: nobody can send, and the call says so
    expectAllRanksOk(runRanks(1, transportEnv(transport, {}), [](RankCtx& ctx) {
      ternComm_t comm = ctx.comm(0);
      int src, x;
      if (ternRecvAnySource(&x, 1, ternInt32, &src, comm, nullptr) != ternInvalidUsage)
        return failf(ctx, "any-source receive on one rank was not refused");
      return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
    }, 1, 60));
    return;
  }
  expectAllRanksOk(runRanks(nranks,
                            transportEnv(transport, {{"TERN_TIMEOUT", "30"},
                                                     {"TERN_BUFFSIZE", "16384"},
                                                     {"TERN_CHUNKSIZE", "4096"}}),
                            anySourceBody, 1, 120));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, P2P,
    ::testing::Combine(::testing::ValuesIn(testTransports()), ::testing::Values(1, 2, 3, 4)),
    [](const auto& info) { return transportRanksName(info); });

}  // namespace
