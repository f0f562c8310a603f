// ternRecvAnySource (extension: receive from any source) over real processes: every
// sender is named once with its own data, also for messages larger than the
// fifo; a receive from any source and a later receive from a named peer keep
// that peer's message order; a peer that has gone on to a later collective
// is not taken for a sender; nobody sending is a timeout with a sentence; bad
// arguments are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

using namespace terntest;

namespace {

constexpr size_t kBig = 300001;  // ~1.2 MB: many times the 16 KiB fifo

uint32_t word(int from, int msg, size_t i) { return static_cast<uint32_t>(from * 1000003u + msg * 7919u + i); }

std::vector<uint32_t> message(int from, int msg, size_t count) {
  std::vector<uint32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = word(from, msg, i);
  return v;
}

bool holds(const std::vector<uint32_t>& v, int from, int msg) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != word(from, msg, i)) return false;
  return true;
}

// Rank 0 receives one large message from every other rank, senders staggered
// (the highest rank first): each sender is named once, with its data.
int everySenderOnce(RankCtx& ctx, ternComm_t comm) {
  const int n = ctx.nranks, me = ctx.rank;
  int fails = 0;
  if (me != 0) {
    usleep(30000 * (n - me));
    std::vector<uint32_t> out = message(me, 0, kBig);
    if (ternSend(out.data(), kBig, ternUint32, 0, comm, nullptr) != ternSuccess)
      fails += failf(ctx, "send to rank 0 failed: %s", ternGetLastError(comm));
    return fails;
  }
  std::set<int> seen;
  for (int k = 1; k < n; ++k) {
    std::vector<uint32_t> in(kBig, 0);
    int peer = -7;
    if (ternRecvAnySource(in.data(), kBig, ternUint32, &peer, comm, nullptr) != ternSuccess)
      return fails + failf(ctx, "ternRecvAnySource failed: %s", ternGetLastError(comm));
    if (peer < 1 || peer >= n || !seen.insert(peer).second)
      fails += failf(ctx, "receive %d named rank %d (seen %zu before)", k, peer, seen.size());
    else if (!holds(in, peer, 0))
      fails += failf(ctx, "the message said to be from rank %d holds other data", peer);
  }
  return fails;
}

// In one group, a receive from any source and then one from rank 1; rank 1
// sends two messages, nobody else sends: the first is the any-source one's.
int orderWithNamedReceive(RankCtx& ctx, ternComm_t comm) {
  const int me = ctx.rank;
  int fails = 0;
  if (me == 1) {
    std::vector<uint32_t> m0 = message(1, 0, 1000), m1 = message(1, 1, 1000);
    ternGroupStart();
    ternSend(m0.data(), m0.size(), ternUint32, 0, comm, nullptr);
    ternSend(m1.data(), m1.size(), ternUint32, 0, comm, nullptr);
    if (ternGroupEnd() != ternSuccess) fails += failf(ctx, "sends failed: %s", ternGetLastError(comm));
  } else if (me == 0) {
    std::vector<uint32_t> a(1000, 0), b(1000, 0);
    int peer = -7;
    ternGroupStart();
    ternRecvAnySource(a.data(), a.size(), ternUint32, &peer, comm, nullptr);
    ternRecv(b.data(), b.size(), ternUint32, 1, comm, nullptr);
    if (ternGroupEnd() != ternSuccess) return failf(ctx, "receives failed: %s", ternGetLastError(comm));
    if (peer != 1 || !holds(a, 1, 0) || !holds(b, 1, 1))
      fails += failf(ctx, "any-source receive named %d; messages in order: %d %d", peer, holds(a, 1, 0),
                     holds(b, 1, 1));
  }
  return fails;
}

// Rank 1 goes straight on to an allreduce (its descriptor reaches rank 0 on
// the same stream) while rank 2 sends late: the receive must name rank 2.
int laterCollectiveIsNoSender(RankCtx& ctx, ternComm_t comm) {
  const int me = ctx.rank;
  int fails = 0;
  if (me == 0) {
    std::vector<uint32_t> in(64, 0);
    int peer = -7;
    if (ternRecvAnySource(in.data(), in.size(), ternUint32, &peer, comm, nullptr) != ternSuccess)
      fails += failf(ctx, "ternRecvAnySource failed: %s", ternGetLastError(comm));
    else if (peer != 2 || !holds(in, 2, 5))
      fails += failf(ctx, "named rank %d, expected the late sender 2", peer);
  } else if (me == 2) {
    usleep(200000);
    std::vector<uint32_t> out = message(2, 5, 64);
    if (ternSend(out.data(), out.size(), ternUint32, 0, comm, nullptr) != ternSuccess)
      fails += failf(ctx, "send failed: %s", ternGetLastError(comm));
  }
  std::vector<int> one(1, 1);
  if (ternAllReduce(one.data(), one.data(), 1, ternInt32, ternSum, comm, nullptr) != ternSuccess ||
      one[0] != ctx.nranks)
    fails += failf(ctx, "the allreduce after it failed (%d): %s", one[0], ternGetLastError(comm));
  return fails;
}

int recvAnyBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  // A barrier between the parts: a sender that went on to the next part
  // would otherwise be a sender to the previous part's receives from any
  // source (which is what they are for, but not what the parts check).
  int fails = everySenderOnce(ctx, comm);
  if (ternBarrier(comm) != ternSuccess) fails += failf(ctx, "barrier failed: %s", ternGetLastError(comm));
  fails += orderWithNamedReceive(ctx, comm);
  if (ternBarrier(comm) != ternSuccess) fails += failf(ctx, "barrier failed: %s", ternGetLastError(comm));
  if (ctx.nranks >= 3) fails += laterCollectiveIsNoSender(ctx, comm);
  if (ternCommDestroy(comm) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails ? 1 : 0;
}

class RecvAny : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RecvAny, NamesTheSenderAndKeepsOrder) {
  auto [transport, nranks] = GetParam();
  expectAllRanksOk(runRanks(nranks,
                            transportEnv(transport, {{"TERN_TIMEOUT", "30"},
                                                     {"TERN_BUFFSIZE", "16384"},
                                                     {"TERN_CHUNKSIZE", "4096"}}),
                            recvAnyBody, 1, 120));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, RecvAny,
    ::testing::Combine(::testing::ValuesIn(testTransports()), ::testing::Values(2, 3, 4)),
    [](const auto& info) { return transportRanksName(info); });

// Nobody sends: a timeout naming the receive; bad arguments: sentences.
int lonelyBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  int fails = 0;
  if (ctx.rank == 0) {
    uint32_t x = 0;
    int peer = 0;
    if (ternRecvAnySource(&x, 1, ternUint32, nullptr, comm, nullptr) != ternInvalidArgument ||
        !strstr(ternGetLastError(comm), "source is NULL"))
      fails += failf(ctx, "a NULL source was not refused: %s", ternGetLastError(comm));
    if (ternRecvAnySource(&x, 0, ternUint32, &peer, comm, nullptr) != ternInvalidArgument)
      fails += failf(ctx, "count 0 was not refused");
    ternResult_t r = ternRecvAnySource(&x, 1, ternUint32, &peer, comm, nullptr);
    if (r != ternTimeout || !strstr(ternGetLastError(comm), "any source"))
      fails += failf(ctx, "nobody sending gave %d: %s", r, ternGetLastError(comm));
  } else {
    sleep(4);  // past rank 0's timeout; then its failure reaches us or it has left
  }
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

TEST(RecvAnyErrors, NobodySendingTimesOutAndBadArgumentsAreRefused) {
  expectAllRanksOk(runRanks(2, {{"TERN_TIMEOUT", "1"}}, lonelyBody, 1, 60));
}

}  // namespace
