// Hosts (issue 45): ranks grouped by host identity at init, TERN_HOST_ID
// emulating hosts on one machine (shm inside an emulated host, tcp between
// them), the layout plans read (topology/hosts.h), and the two-level
// allreduce on it: the algorithm's choice as a pure function, results bit
// for bit on even and uneven hosts, its bytes on shm and on the network,
// and ranks that disagree getting an error.  White-box: each rank reads its
// communicator's layout and per-connection byte counters.
#include <gtest/gtest.h>

#include <fstream>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checker.h"
#include "collectives/collectives.h"
#include "comm/comm.h"
#include "harness.h"
#include "model/collective_model.h"
#include "model/model_file.h"
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

// ---- the allreduce's algorithm: a pure function of the facts ----

tern::AlgoFacts facts(const char* forced, size_t bytes, int hosts, int minLocal, int nranks = 4,
                      tern::OpKind kind = tern::OpKind::AllReduce, int maxLocal = 0) {
  tern::AlgoFacts f;
  f.kind = kind;
  f.forced = forced;
  f.bytes = bytes;
  f.smallBytes = 32 << 10;
  f.nranks = nranks;
  f.hosts = hosts;
  f.minLocal = minLocal;
  f.maxLocal = maxLocal ? maxLocal : minLocal;
  return f;
}

TEST(AlgoChoice, PureFunctionOfTheFacts) {
  using tern::Algo;
  using tern::chooseAlgo;
  const size_t big = 64 << 20, mid = tern::kTwoLevelFromBytes - 8;
  // auto: two-level only with several hosts, each of several ranks, and a large call.
  EXPECT_EQ(chooseAlgo(facts("auto", big, 2, 2)), Algo::TwoLevel);
  EXPECT_EQ(chooseAlgo(facts("auto", tern::kTwoLevelFromBytes, 4, 8, 32)), Algo::TwoLevel);
  EXPECT_EQ(chooseAlgo(facts("auto", mid, 2, 2)), Algo::Ring);
  EXPECT_EQ(chooseAlgo(facts("auto", big, 1, 4)), Algo::Ring);          // one host
  EXPECT_EQ(chooseAlgo(facts("auto", big, 4, 1)), Algo::Ring);          // a rank per host
  EXPECT_EQ(chooseAlgo(facts("auto", big, 2, 1, 4, tern::OpKind::AllReduce, 3)), Algo::Ring);  // 3+1
  EXPECT_EQ(chooseAlgo(facts("auto", 32 << 10, 2, 2)), Algo::RecursiveDoubling);
  // Forced: that one above the small threshold, recursive doubling at or below it.
  EXPECT_EQ(chooseAlgo(facts("ring", big, 2, 2)), Algo::Ring);
  EXPECT_EQ(chooseAlgo(facts("rd", big, 2, 2)), Algo::RecursiveDoubling);
  EXPECT_EQ(chooseAlgo(facts("twolevel", (32 << 10) + 4, 1, 3, 3)), Algo::TwoLevel);
  EXPECT_EQ(chooseAlgo(facts("twolevel", big, 2, 1, 4, tern::OpKind::AllReduce, 3)), Algo::TwoLevel);
  EXPECT_EQ(chooseAlgo(facts("twolevel", 4096, 2, 2)), Algo::RecursiveDoubling);
  EXPECT_EQ(chooseAlgo(facts("ring", 16, 2, 2)), Algo::RecursiveDoubling);
  // Allgather: no small threshold binds it, rd is the ring, uneven hosts the ring.
  const tern::OpKind ag = tern::OpKind::AllGather;
  EXPECT_EQ(chooseAlgo(facts("auto", big, 2, 2, 4, ag)), Algo::TwoLevel);
  EXPECT_EQ(chooseAlgo(facts("auto", tern::kTwoLevelAllGatherFromBytes - 8, 2, 2, 4, ag)), Algo::Ring);
  EXPECT_EQ(chooseAlgo(facts("auto", tern::kTwoLevelAllGatherFromBytes, 2, 2, 4, ag)), Algo::TwoLevel);
  EXPECT_EQ(chooseAlgo(facts("twolevel", 64, 2, 2, 4, ag)), Algo::TwoLevel);
  EXPECT_EQ(chooseAlgo(facts("twolevel", big, 2, 1, 4, ag, 3)), Algo::Ring);
  EXPECT_EQ(chooseAlgo(facts("auto", big, 3, 2, 7, ag, 3)), Algo::Ring);
  EXPECT_EQ(chooseAlgo(facts("rd", big, 2, 2, 4, ag)), Algo::Ring);
  EXPECT_EQ(chooseAlgo(facts("auto", big, 4, 1, 4, ag)), Algo::Ring);
  // The ternary allreduce: two levels with several hosts of as many ranks
  // (more than one), whatever the size (its own minimum applies first),
  // unless forced flat or clipping.
  using tern::chooseTernaryTwoLevel;
  const tern::OpKind tn = tern::OpKind::Ternary;
  EXPECT_TRUE(chooseTernaryTwoLevel(facts("auto", big, 2, 2, 4, tn), false));
  EXPECT_TRUE(chooseTernaryTwoLevel(facts("twolevel", 4096, 3, 4, 12, tn), false));
  EXPECT_FALSE(chooseTernaryTwoLevel(facts("auto", big, 2, 2, 4, tn), true));     // clipping
  EXPECT_FALSE(chooseTernaryTwoLevel(facts("ring", big, 2, 2, 4, tn), false));
  EXPECT_FALSE(chooseTernaryTwoLevel(facts("rd", big, 2, 2, 4, tn), false));
  EXPECT_FALSE(chooseTernaryTwoLevel(facts("auto", big, 1, 4, 4, tn), false));    // one host
  EXPECT_FALSE(chooseTernaryTwoLevel(facts("auto", big, 4, 1, 1, tn), false));    // a rank per host
  EXPECT_FALSE(chooseTernaryTwoLevel(facts("auto", big, 2, 1, 4, tn, 3), false));  // 3+1
}

// ---- two-level allreduce across emulated hosts ----

// Bytes this rank sent over shm and over tcp at the default level.
void bytesByTransport(ternComm_t c, uint64_t* shm, uint64_t* tcp) {
  *shm = *tcp = 0;
  for (tern::Conn* k : c->table->connsMade()) {
    if (k->level != TERN_PRIORITY_DEFAULT) continue;
    const uint64_t b = k->bytesSent.load();
    if (!strcmp(k->name(), "shm")) *shm += b;
    if (!strcmp(k->name(), "tcp")) *tcp += b;
  }
}

// Every type and op, out of place and in place, at sizes around chunk and
// slice edges (tiny chunks and fifos; TERN_SMALL_THRESHOLD=0 so the forced
// algorithm runs at every size), checked bit for bit (values every type
// holds exactly: perf/harness/values.h).
int twoLevelBody(RankCtx& ctx, const std::string& hosts) {
  setenv("TERN_HOST_ID", hostIdOf(hosts, ctx.rank).c_str(), 1);
  setenv("TERN_CHUNKSIZE", "4096", 1);
  setenv("TERN_BUFFSIZE", "16384", 1);
  setenv("TERN_SMALL_THRESHOLD", "0", 1);
  ternComm_t comm = ctx.comm();
  Checker check{ctx, comm};
  for (int t = 0; t < ternNumTypes; ++t) {
    const auto dt = static_cast<ternDataType_t>(t);
    const size_t edge = 4096 / ternTypeSize(dt) * ctx.nranks;
    for (size_t count : {size_t(1), size_t(7), edge - 1, 3 * edge + 5})
      for (int o = 0; o < ternNumOps; ++o)
        for (bool inplace : {false, true}) check.allReduce(dt, static_cast<ternRedOp_t>(o), count, inplace);
  }
  for (ternRedOp_t op : {ternSum, ternAvg}) check.allReduce(ternFloat32, op, 300007, false);
  // Allgather too: two-level where the hosts are alike, the ring where not.
  for (ternDataType_t dt : {ternInt8, ternFloat64})
    for (size_t count : {size_t(1), size_t(3 * 4096 + 5)})
      for (bool inplace : {false, true}) check.allGather(dt, count, inplace);
  uint64_t shm, tcp;
  bytesByTransport(comm, &shm, &tcp);
  int fails = check.failures;
  // Each emulated host's ranks really share memory, and the hosts really
  // talk over the network (a host of one rank has no shm peer).
  const auto onMine = std::count(hosts.begin(), hosts.end(), hosts[ctx.rank]);
  if (onMine == 1 ? shm != 0 : shm == 0) fails += failf(ctx, "%llu bytes over shm", (unsigned long long)shm);
  if (onMine < ctx.nranks ? tcp == 0 : tcp != 0) fails += failf(ctx, "%llu bytes over tcp", (unsigned long long)tcp);
  ternCommDestroy(comm);
  return fails;
}

class TwoLevel : public ::testing::TestWithParam<std::string> {};

TEST_P(TwoLevel, EveryTypeAndOpBitwise) {
  expectAllRanksOk(runRanks(static_cast<int>(GetParam().size()),
                            {{"TERN_TIMEOUT", "60"}, {"TERN_ALGO", "twolevel"}},
                            [&](RankCtx& c) { return twoLevelBody(c, GetParam()); }, 1, 300));
}

// 2 hosts x 2 ranks, uneven hosts (3+1, 2+1), a host's ranks not
// contiguous, and one host (the scheme is a reduce-scatter and an allgather).
INSTANTIATE_TEST_SUITE_P(Hosts, TwoLevel, ::testing::Values("aabb", "aaab", "aab", "abab", "aaa"),
                         [](const auto& info) {
                           std::string n;
                           for (char h : info.param) n += h;
                           return n;
                         });

// The bytes each emulated host puts on the network at 2 hosts x 2 ranks
// for a 1 MiB float32 allreduce (two-level, forced or chosen by auto: 2(H-1)/H
// of the buffer per host; the host-ordered flat ring 2(N-1)/N, 1.5x as much)
// or an allgather of 256 KiB blocks (two-level: L(H-1) = 2 blocks per host;
// the ring N-1 = 3).  Rank 0 gathers every rank's tcp bytes.
int trafficBody(RankCtx& ctx, const char* algo, bool allGather, uint64_t* hostTcp) {
  setenv("TERN_HOST_ID", hostIdOf("aabb", ctx.rank).c_str(), 1);
  setenv("TERN_ALGO", algo, 1);
  ternComm_t comm = ctx.comm();
  const size_t n = 1 << 18;  // 1 MiB of float32
  std::vector<float> x(n, static_cast<float>(ctx.rank + 1)), y(allGather ? n / 4 * ctx.nranks : n);
  int fails = 0;
  if (allGather ? ternAllGather(x.data(), y.data(), n / 4, ternFloat32, comm, nullptr) != ternSuccess ||
                      y[y.size() - 1] != static_cast<float>(ctx.nranks)
                : ternAllReduce(x.data(), y.data(), n, ternFloat32, ternSum, comm, nullptr) != ternSuccess ||
                      y[n - 1] != 10.f)
    fails += failf(ctx, "%s (%s) failed or wrong", allGather ? "allgather" : "allreduce", algo);
  uint64_t shm, tcp;
  bytesByTransport(comm, &shm, &tcp);
  // Every rank's tcp bytes to rank 0, over tern itself.
  std::vector<unsigned long long> all(ctx.nranks), mine(ctx.nranks, 0);
  mine[ctx.rank] = tcp;
  if (ternAllReduce(mine.data(), all.data(), ctx.nranks, ternUint64, ternSum, comm, nullptr) != ternSuccess)
    fails += failf(ctx, "gathering the byte counts failed");
  if (ctx.rank == 0) {
    hostTcp[0] = all[0] + all[1];
    hostTcp[1] = all[2] + all[3];
  }
  ternCommDestroy(comm);
  return fails;
}

TEST(TwoLevel, SendsTwoThirdsOfTheFlatRingsBytesPerHost) {
  const double buf = 1 << 20;
  for (bool allGather : {false, true})
    for (const char* algo : {"twolevel", "auto", "ring"}) {
      if (allGather && std::string(algo) == "auto") continue;  // the same rule (AlgoChoice)
      // Rank 0 writes its host sums here (shared with the parent through a pipe).
      Signal pipe;
      expectAllRanksOk(runRanks(4, {{"TERN_TIMEOUT", "30"}}, [&](RankCtx& c) {
        uint64_t host[2] = {0, 0};
        int r = trafficBody(c, algo, allGather, host);
        if (c.rank == 0) (void)!write(pipe.fd[1], host, sizeof host);
        return r;
      }));
      uint64_t host[2] = {0, 0};
      ASSERT_EQ(read(pipe.fd[0], host, sizeof host), static_cast<ssize_t>(sizeof host));
      // Allreduce: two-level 2(H-1)/H = 1 buffer per host, the ring 2(N-1)/N
      // = 1.5; allgather of 4 blocks of a quarter buffer: 2 and 3 blocks
      // (descriptors, padding and the small gathering allreduce on top: < 1%).
      const bool ring = std::string(algo) == "ring";
      const double want = allGather ? (ring ? 0.75 : 0.5) : (ring ? 1.5 : 1.0);
      for (int h = 0; h < 2; ++h) {
        EXPECT_GT(host[h], want * buf) << algo << (allGather ? " allgather" : " allreduce") << " host " << h;
        EXPECT_LT(host[h], want * buf * 1.01) << algo << (allGather ? " allgather" : " allreduce") << " host " << h;
      }
    }
}

// Ranks set up by `setUp` (their environment) disagree on how to plan: every
// rank's init fails with ternInvalidUsage and a sentence naming `names`.
// Rank 0's process holds the bootstrap root: it waits until all have failed.
template <class SetUp>
void expectInitRefusedOnEveryRank(int nranks, const char* names, SetUp setUp) {
  Signal failed;
  expectAllRanksOk(runRanks(nranks, {{"TERN_TIMEOUT", "30"}}, [&](RankCtx& c) {
    setUp(c);
    ternComm_t comm = nullptr;
    ternResult_t r = ternCommInitRank(&comm, c.nranks, c.ids[0], c.rank);
    const std::string why = ternGetLastError(nullptr);
    if (c.rank > 0) failed.post();
    for (int q = 1; c.rank == 0 && q < c.nranks; ++q) failed.await();
    if (r != ternInvalidUsage || why.find(names) == std::string::npos)
      return failf(c, "ranks that disagree on %s: %s (%s)", names, ternGetErrorString(r), why.c_str());
    return 0;
  }));
}

// With a cost model, auto asks it for an allreduce above the threshold: the
// algorithm model::choose predicts fastest, so two models can choose
// differently at one size; the allgather and forced names are unchanged.
TEST(AlgoChoice, AutoAsksTheCostModelWhenItHasOne) {
  using tern::Algo;
  using tern::chooseAlgo;
  namespace m = tern::model;
  const m::Model slowNet = m::defaultModel();  // tcp at 1 Gbit/s: fewer NIC bytes win
  // Every step slow (5 ms) and bytes cheap: the fewest steps win, which is
  // recursive doubling (2 steps at 4 ranks; the ring takes 6, two-level 4).
  m::Model slowShm = m::defaultModel();
  m::setNetwork(slowShm, m::Link::Tcp, 400, 5000);
  slowShm.links[static_cast<int>(m::Link::Shm)].latencyUs = 5000;
  auto with = [](const m::Model& model, size_t bytes, const char* forced = "auto",
                 tern::OpKind kind = tern::OpKind::AllReduce) {
    tern::AlgoFacts f = facts(forced, bytes, 2, 2, 4, kind);
    f.model = &model;
    return chooseAlgo(f);
  };
  auto asked = [](const m::Model& model, size_t bytes) {
    m::Call call;
    call.bytes = static_cast<double>(bytes);
    call.layout = m::evenLayout(2, 2);
    m::Limits lim;
    lim.smallBytes = 32 << 10;
    const m::Algo a = m::choose(call, false, model, lim).algo;
    return a == m::Algo::TwoLevel ? Algo::TwoLevel : a == m::Algo::Ring ? Algo::Ring : Algo::RecursiveDoubling;
  };
  const size_t big = 64 << 20;
  for (size_t bytes : {size_t(64) << 10, size_t(1) << 20, big}) {
    EXPECT_EQ(with(slowNet, bytes), asked(slowNet, bytes)) << bytes;
    EXPECT_EQ(with(slowShm, bytes), asked(slowShm, bytes)) << bytes;
  }
  EXPECT_EQ(with(slowNet, big), Algo::TwoLevel);
  EXPECT_EQ(with(slowShm, 1 << 20), Algo::RecursiveDoubling);  // the rule says two-level here
  EXPECT_EQ(chooseAlgo(facts("auto", 1 << 20, 2, 2)), Algo::TwoLevel);
  EXPECT_EQ(chooseAlgo(facts("auto", big, 2, 2)), Algo::TwoLevel);
  EXPECT_EQ(with(slowShm, big, "twolevel"), Algo::TwoLevel);  // forced: the model is not asked
  EXPECT_EQ(with(slowShm, 32 << 10), Algo::RecursiveDoubling);  // at the threshold: the small path's
  EXPECT_EQ(with(slowShm, big, "auto", tern::OpKind::AllGather), Algo::TwoLevel);  // the rule
}

// TERN_MODEL_FILE is read at init: a malformed file is refused with a
// sentence naming it, and ranks with different models fail to make the
// communicator (they would choose differently).
TEST(AlgoChoice, TheModelFileIsCheckedAndAgreedAtInit) {
  const std::string good = testing::TempDir() + "tern_model_good.json";
  const std::string other = testing::TempDir() + "tern_model_other.json";
  const std::string bad = testing::TempDir() + "tern_model_bad.json";
  tern::model::Model m = tern::model::defaultModel();
  { std::ofstream(good) << tern::model::modelJson(m); }
  tern::model::setNetwork(m, tern::model::Link::Tcp, 10, 30);
  { std::ofstream(other) << tern::model::modelJson(m); }
  { std::ofstream(bad) << "{\"format\": \"tern collective model\", \"version\": 1}"; }
  expectAllRanksOk(runRanks(1, {{"TERN_MODEL_FILE", bad}}, [&](RankCtx& c) {
    ternComm_t comm = nullptr;
    ternResult_t r = ternCommInitRank(&comm, 1, c.ids[0], 0);
    const std::string why = ternGetLastError(nullptr);
    if (r != ternInvalidArgument || why.rfind("TERN_MODEL_FILE: ", 0) != 0 || why.find(bad) == std::string::npos)
      return failf(c, "malformed model: %s (%s)", ternGetErrorString(r), why.c_str());
    return 0;
  }));
  // The same model on 2 hosts x 2 ranks: a 1 MiB allreduce as it chooses.
  expectAllRanksOk(runRanks(4, {{"TERN_MODEL_FILE", good}, {"TERN_TIMEOUT", "60"}}, [](RankCtx& c) {
    setenv("TERN_HOST_ID", hostIdOf("aabb", c.rank).c_str(), 1);
    ternComm_t comm = nullptr;
    if (ternCommInitRank(&comm, c.nranks, c.ids[0], c.rank) != ternSuccess)
      return failf(c, "the same model on every rank: %s", ternGetLastError(nullptr));
    std::vector<float> x(1 << 18, static_cast<float>(c.rank + 1)), y(x.size());
    int fails = 0;
    if (ternAllReduce(x.data(), y.data(), x.size(), ternFloat32, ternSum, comm, nullptr) != ternSuccess)
      fails += failf(c, "allreduce under the model: %s", ternGetLastError(comm));
    else if (std::count(y.begin(), y.end(), 10.0f) != static_cast<long>(y.size()))
      fails += failf(c, "allreduce under the model: wrong sums");
    ternCommDestroy(comm);
    return fails;
  }));
  expectInitRefusedOnEveryRank(2, "TERN_MODEL_FILE", [&](RankCtx& c) {
    setenv("TERN_MODEL_FILE", (c.rank == 0 ? good : other).c_str(), 1);
  });
}

// Ranks that would plan an allreduce differently fail to make the
// communicator (TERN_ALGO is agreed at init), a bad value is refused with a
// sentence, and ranks that call different ops get an error, not a result
// (the descriptor check every plan's first message carries).
TEST(TwoLevel, RanksThatDisagreeGetAnError) {
  expectInitRefusedOnEveryRank(4, "TERN_ALGO", [](RankCtx& c) {
    setenv("TERN_HOST_ID", hostIdOf("aabb", c.rank).c_str(), 1);
    setenv("TERN_ALGO", c.rank < 2 ? "twolevel" : "ring", 1);
  });
  expectAllRanksOk(runRanks(1, {{"TERN_ALGO", "bogus"}}, [](RankCtx& c) {
    ternComm_t comm = nullptr;
    ternResult_t r = ternCommInitRank(&comm, 1, c.ids[0], 0);
    const std::string why = ternGetLastError(nullptr);
    if (r != ternInvalidArgument || why != "TERN_ALGO='bogus' is not one of auto, ring, rd, twolevel")
      return failf(c, "TERN_ALGO=bogus: %s (%s)", ternGetErrorString(r), why.c_str());
    return 0;
  }));
  // Different ops: every rank gets an error, none a result.  The ranks that
  // read the odd rank's descriptor report the mismatch (ternInvalidUsage);
  // a rank that only hears of it may first see a failed peer shut its
  // sockets (ternRemoteError), whichever comes first.  Exit 0: the mismatch,
  // 2: a remote error, 1: anything else.
  RunResult r = runRanks(4, {{"TERN_TIMEOUT", "30"}, {"TERN_ALGO", "twolevel"}}, [](RankCtx& c) {
    setenv("TERN_HOST_ID", hostIdOf("aabb", c.rank).c_str(), 1);
    ternComm_t comm = c.comm();
    std::vector<float> x(1 << 18, 1.f);
    ternResult_t r = ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, c.rank == 3 ? ternMax : ternSum,
                                   comm, nullptr);
    // A rank whose neighbours agreed with it may finish the call; it learns
    // at its next one.  No rank exits before the others had the time to
    // learn (an exit is a remote error to a peer still sending to it).
    if (r == ternSuccess) r = ternBarrier(comm);
    const std::string why = ternGetLastError(comm);
    usleep(300 * 1000);
    ternCommAbort(comm);
    if (r == ternInvalidUsage && why.find("allreduce") != std::string::npos) return 0;
    if (r == ternRemoteError) return 2;
    return failf(c, "different ops: %s (%s)", ternGetErrorString(r), why.c_str());
  });
  EXPECT_FALSE(r.timedOut);
  int saw = 0;
  for (size_t i = 0; i < r.exitCodes.size(); ++i) {
    EXPECT_TRUE(r.exitCodes[i] == 0 || r.exitCodes[i] == 2) << "rank " << i;
    saw += r.exitCodes[i] == 0;
  }
  EXPECT_GT(saw, 0) << "no rank reported the mismatch";
}

}  // namespace
