// The connection table (transport/conn_table.h), white-box: connections are
// made unopened at init and opened on first use, one per (peer, level) a
// rank talks on; both ranks using a level for the first time at once make
// one connection (tcp: one socket, not two).  Over shm, tcp and UCX (where
// built).  A peer that died or never answers while connections open:
// tests/test_flows.cc (OpeningFailure).
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "harness.h"

using namespace terntest;

namespace {

// The sockets this process holds (their inodes): the tcp sockets a rank
// makes show up here and nowhere else.
std::set<std::string> sockets() {
  std::set<std::string> out;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char path[300], target[128];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::string(target).rfind("socket:", 0) == 0) out.insert(target);
  }
  closedir(d);
  return out;
}

size_t newSockets(const std::set<std::string>& before) {
  size_t n = 0;
  for (const std::string& s : sockets()) n += before.count(s) == 0;
  return n;
}

// Which (peer, level) connections of the communicator are open.
std::set<std::pair<int, int>> openConns(ternComm_t comm) {
  std::set<std::pair<int, int>> out;
  for (int level = 0; level < TERN_PRIORITY_LEVELS; ++level)
    for (int p = 0; p < comm->nranks; ++p)
      if (p != comm->rank &&
          comm->table->conn(p, level)->openState.load() == tern::Conn::kOpen)
        out.insert({p, level});
  return out;
}

int transfer(ternComm_t comm, bool send, int peer, int level) {
  std::vector<char> buf(64 << 10, 7);
  ternSetPriority(level);
  ternResult_t r = send ? ternSend(buf.data(), buf.size(), ternInt8, peer, comm, nullptr)
                        : ternRecv(buf.data(), buf.size(), ternInt8, peer, comm, nullptr);
  ternSetPriority(TERN_PRIORITY_DEFAULT);
  return r != ternSuccess || buf[buf.size() - 1] != 7;
}

// 3 ranks in a chain: 0 -> 1 at level 2, 1 -> 2 at level 2, then 2 -> 0 at
// level 7 (another class, later).  Each rank talks to two peers, on one
// level each: exactly those two connections open, nothing at init.
int chainBody(RankCtx& ctx, bool countSockets) {
  const std::set<std::string> before = sockets();
  ternComm_t comm = ctx.comm(0);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  int fails = 0;
  if (comm->table->openedCount() != 0 || !openConns(comm).empty())
    fails += failf(ctx, "%d connections open after init", comm->table->openedCount());
  // Init leaves one control socket per peer and the listener (tcp data
  // sockets came 8 per peer before the table).
  const std::set<std::string> afterInit = sockets();
  if (countSockets && newSockets(before) != static_cast<size_t>(ctx.nranks))
    fails += failf(ctx, "init made %zu sockets, want %d", newSockets(before), ctx.nranks);
  const int r = ctx.rank;
  if (r == 0) fails += transfer(comm, true, 1, 2) + transfer(comm, false, 2, 7);
  if (r == 1) fails += transfer(comm, false, 0, 2) + transfer(comm, true, 2, 2);
  if (r == 2) fails += transfer(comm, false, 1, 2) + transfer(comm, true, 0, 7);
  std::set<std::pair<int, int>> want = r == 0   ? std::set<std::pair<int, int>>{{1, 2}, {2, 7}}
                                       : r == 1 ? std::set<std::pair<int, int>>{{0, 2}, {2, 2}}
                                                : std::set<std::pair<int, int>>{{1, 2}, {0, 7}};
  std::set<std::pair<int, int>> got = openConns(comm);
  if (got != want || comm->table->openedCount() != 2) {
    std::string s;
    for (auto& pl : got) s += " (" + std::to_string(pl.first) + "," + std::to_string(pl.second) + ")";
    fails += failf(ctx, "open (peer,level):%s; %d opened", s.c_str(), comm->table->openedCount());
  }
  if (countSockets && newSockets(afterInit) != 2)
    fails += failf(ctx, "the two connections made %zu sockets, want 2", newSockets(afterInit));
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

class ConnTableT : public ::testing::TestWithParam<std::string> {};

TEST_P(ConnTableT, OpensOneConnectionPerPeerAndLevelUsedOnFirstUse) {
  const bool tcp = GetParam() == "tcp";
  expectAllRanksOk(runRanks(3, transportEnv(GetParam()), [&](RankCtx& c) { return chainBody(c, tcp); }, 1, 60));
}

// Both ranks open every level at the same moment, in opposite orders (an
// allreduce per level, all in flight at once): one connection per level,
// right results, and over tcp one socket per level, not two.
int simultaneousBody(RankCtx& ctx, bool countSockets) {
  ternComm_t comm = ctx.comm(0);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  const std::set<std::string> afterInit = sockets();
  std::vector<std::vector<float>> x(TERN_PRIORITY_LEVELS, std::vector<float>(1024));
  ternRequest_t req[TERN_PRIORITY_LEVELS];
  for (int i = 0; i < TERN_PRIORITY_LEVELS; ++i) {
    const int level = ctx.rank == 0 ? i : TERN_PRIORITY_LEVELS - 1 - i;
    std::fill(x[level].begin(), x[level].end(), static_cast<float>(level + ctx.rank));
    ternSetPriority(level);
    ternGroupStart();
    ternAllReduce(x[level].data(), x[level].data(), x[level].size(), ternFloat32, ternSum, comm, nullptr);
    ternGroupEndAsync(&req[level]);
  }
  ternSetPriority(TERN_PRIORITY_DEFAULT);
  int fails = 0;
  for (int level = 0; level < TERN_PRIORITY_LEVELS; ++level) {
    ternResult_t r = ternRequestWait(req[level]);
    if (r != ternSuccess || x[level][1000] != 2.0f * level + 1)
      fails += failf(ctx, "level %d: %s, %g", level, ternGetErrorString(r), x[level][1000]);
  }
  if (openConns(comm).size() != TERN_PRIORITY_LEVELS || comm->table->openedCount() != TERN_PRIORITY_LEVELS)
    fails += failf(ctx, "%zu connections open, %d opened", openConns(comm).size(), comm->table->openedCount());
  if (countSockets && newSockets(afterInit) != TERN_PRIORITY_LEVELS)
    fails += failf(ctx, "%zu sockets for %d levels", newSockets(afterInit), TERN_PRIORITY_LEVELS);
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

TEST_P(ConnTableT, BothRanksOpeningEveryLevelAtOnceMakeOneConnectionEach) {
  const bool tcp = GetParam() == "tcp";
  expectAllRanksOk(runRanks(2, transportEnv(GetParam()), [&](RankCtx& c) { return simultaneousBody(c, tcp); }, 1, 60));
}

// ConnTable::connect after init, from one end only: the other end's table
// opens its side when asked (no operation on either side).
int connectBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  const int peer = 1 - ctx.rank, level = 4;
  if (ctx.rank == 0 && comm->table->connect(peer, level) != ternSuccess)
    return failf(ctx, "connect: %s", ternGetLastError(nullptr));
  tern::Conn* c = comm->table->conn(peer, level);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (c->openState.load() != tern::Conn::kOpen && std::chrono::steady_clock::now() < until)
    usleep(1000);
  int fails = 0;
  if (c->openState.load() != tern::Conn::kOpen || openConns(comm).size() != 1)
    fails += failf(ctx, "level %d: state %d, %zu open", level, c->openState.load(), openConns(comm).size());
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

TEST_P(ConnTableT, ConnectAfterInitOpensBothEnds) {
  expectAllRanksOk(runRanks(2, transportEnv(GetParam()), connectBody, 1, 60));
}

INSTANTIATE_TEST_SUITE_P(Transports, ConnTableT, ::testing::ValuesIn(testTransports()),
                         [](const auto& info) { return testName(info.param); });

}  // namespace
