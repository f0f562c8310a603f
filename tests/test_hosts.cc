// Hosts (issue 45): ranks grouped by host identity at init, TERN_HOST_ID
// emulating hosts on one machine (shm inside an emulated host, tcp between
// them), and the layout plans read (topology/hosts.h).  White-box: each
// rank reads its communicator's layout and per-connection byte counters.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "harness.h"
#include "topology/hosts.h"

using namespace terntest;

namespace {

// ---- the layout as a pure function of the identities ----

TEST(HostLayout, HostsInOrderOfTheirLowestRank) {
  tern::HostLayout h = tern::groupByHost({7, 9, 7, 5, 9});
  ASSERT_EQ(h.hosts(), 3);
  EXPECT_EQ(h.members[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(h.members[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(h.members[2], (std::vector<int>{3}));
  EXPECT_EQ(h.hostOf, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(h.localRank, (std::vector<int>{0, 0, 1, 0, 1}));
  EXPECT_EQ(h.localSize(4), 2);
  EXPECT_EQ(h.minLocal(), 1);
  EXPECT_EQ(h.maxLocal(), 2);
  EXPECT_EQ(tern::describeHosts(h), "3 hosts (2+2+1 ranks): {0,2} {1,4} {3}");
  EXPECT_EQ(tern::describeHosts(tern::groupByHost({1, 1, 2, 2})), "2 hosts x 2 ranks: {0,1} {2,3}");
  EXPECT_EQ(tern::describeHosts(tern::groupByHost({3})), "1 host x 1 rank: {0}");
  std::vector<uint64_t> many;
  for (int r = 0; r < 40; ++r) many.push_back(r / 4 + (r == 39));  // 10 hosts of 4, the last 3 and 1
  EXPECT_EQ(tern::describeHosts(tern::groupByHost(many)),
            "11 hosts (1 to 4 ranks each): {0,1,2,3} {4,5,6,7} {8,9,10,11} {12,13,14,15} "
            "{16,17,18,19} {20,21,22,23} {24,25,26,27} {28,29,30,31} ...");
}

// ---- TERN_HOST_ID across real ranks ----

// Rank r's emulated host, from a list such as "aab" (rank 2 alone on b).
std::string hostIdOf(const std::string& hosts, int rank) { return std::string(1, hosts[rank]); }

// Every rank: its layout is the one the ids say, a peer of its emulated
// host is reached over shm and any other over tcp, and the ring crosses
// each host boundary once.
int layoutBody(RankCtx& ctx, const std::string& hosts) {
  setenv("TERN_HOST_ID", hostIdOf(hosts, ctx.rank).c_str(), 1);
  ternComm_t comm = ctx.comm();
  int fails = 0;
  std::vector<uint64_t> ids;
  for (char h : hosts) ids.push_back(static_cast<uint64_t>(h));
  const tern::HostLayout want = tern::groupByHost(ids);
  if (comm->hosts.members != want.members || comm->hosts.localRank != want.localRank)
    fails += failf(ctx, "layout %s, want %s", tern::describeHosts(comm->hosts).c_str(),
                   tern::describeHosts(want).c_str());
  for (int p = 0; p < ctx.nranks; ++p) {
    const std::string got = ternCommPeerTransport(comm, p);
    const std::string expect = p == ctx.rank ? "self" : hosts[p] == hosts[ctx.rank] ? "shm" : "tcp";
    if (got != expect) fails += failf(ctx, "transport to rank %d is %s, want %s", p, got.c_str(), expect.c_str());
  }
  std::vector<int> ring(ctx.nranks), wantRing;
  for (const auto& h : want.members) wantRing.insert(wantRing.end(), h.begin(), h.end());
  ternCommRingOrder(comm, ring.data());
  if (ring != wantRing) fails += failf(ctx, "the ring does not keep each host's ranks together");
  ternCommDestroy(comm);
  return fails;
}

TEST(HostId, RanksWithOneIdShareMemoryOthersUseTheNetwork) {
  for (const std::string hosts : {"aabb", "abab", "aab"})
    expectAllRanksOk(runRanks(static_cast<int>(hosts.size()), {{"TERN_TIMEOUT", "30"}},
                              [&](RankCtx& c) { return layoutBody(c, hosts); }, 1, 60));
}

}  // namespace
