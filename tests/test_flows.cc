// Flow classes in the network (docs/DESIGN.md, "Priority in the network"): each
// level's tcp socket (opened on the level's first use) carries its class's DSCP (read back with getsockopt,
// white-box: the test reaches the communicator's connections), the control
// socket the most urgent class's; TERN_FLOW_DSCP and ternConfig_t override
// the defaults, 0,0,0 turns marking off, bad values are refused with a
// sentence.  Statistics per class show which class carried a transfer; a dead
// or silent peer fails operations of every class, while their connections
// open too; TERN_TRACE writes a Chrome trace.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/config.h"
#include "harness.h"
#include "base/json.h"
#include "topology/rdma.h"

using namespace terntest;

namespace {

int sockInt(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  if (getsockopt(fd, level, name, &v, &len) != 0) return -1;
  return v;
}

// What each flow class (of 3) should carry, and how the communicator is made.
struct Marking {
  const char* name;
  const char* env;     // TERN_FLOW_DSCP, or "" for unset
  int config[3];       // ternConfig_t.trafficClass, -1: leave unset
  int expect[3];       // DSCP per class
};

// Test names and failure messages show the case's name, not its bytes.
void PrintTo(const Marking& m, std::ostream* os) { *os << m.name; }

ternComm_t initWith(RankCtx& ctx, const Marking& m) {
  ternConfig_t cfg = TERN_CONFIG_INITIALIZER;
  for (int k = 0; k < 3; ++k)
    if (m.config[k] >= 0) cfg.trafficClass[k] = m.config[k];
  ternComm_t comm = nullptr;
  if (ternCommInitRankConfig(&comm, ctx.nranks, ctx.ids[0], ctx.rank, &cfg) != ternSuccess)
    return nullptr;
  return comm;
}

// Every level's socket to the peer, opened by the level's first allreduce,
// has TOS = DSCP << 2 of its class and the class's SO_PRIORITY (marked
// sockets only); the control socket has class 0's.
int checkMarks(RankCtx& ctx, const Marking& m) {
  ternComm_t comm = initWith(ctx, m);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  const int peer = 1 - ctx.rank;
  int fails = 0;
  for (int level = 0; level < TERN_PRIORITY_LEVELS; ++level) {
    float x = 1;
    ternSetPriority(level);
    if (ternAllReduce(&x, &x, 1, ternFloat32, ternSum, comm, nullptr) != ternSuccess || x != 2)
      fails += failf(ctx, "level %d allreduce: %s", level, ternGetLastError(comm));
  }
  ternSetPriority(TERN_PRIORITY_DEFAULT);
  for (int level = 0; level < TERN_PRIORITY_LEVELS; ++level) {
    int k = tern::flowClassOf(level, 3);
    tern::Conn* c = comm->table->conn(peer, level);
    int fd = c->pollFd();
    int tos = sockInt(fd, IPPROTO_IP, IP_TOS), prio = sockInt(fd, SOL_SOCKET, SO_PRIORITY);
    int wantPrio = m.expect[k] ? tern::flowSoPriority(k, 3) : 0;
    if (tos != m.expect[k] << 2 || prio != wantPrio)
      fails += failf(ctx, "%s: level %d socket has TOS 0x%02x priority %d, want 0x%02x and %d",
                     m.name, level, tos, prio, m.expect[k] << 2, wantPrio);
    if (c->flowClass != k) fails += failf(ctx, "level %d is in class %d, not %d", level, c->flowClass, k);
  }
  int ctl = sockInt(comm->table->controlFd(peer), IPPROTO_IP, IP_TOS);
  if (ctl != m.expect[0] << 2)
    fails += failf(ctx, "%s: control socket TOS 0x%02x, want 0x%02x", m.name, ctl, m.expect[0] << 2);
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

class FlowMarking : public ::testing::TestWithParam<Marking> {};

TEST_P(FlowMarking, EachLevelSocketCarriesItsClassDscp) {
  const Marking m = GetParam();
  std::map<std::string, std::string> env = {{"TERN_TRANSPORT", "tcp"}};
  if (*m.env) env["TERN_FLOW_DSCP"] = m.env;
  expectAllRanksOk(runRanks(2, env, [&](RankCtx& c) { return checkMarks(c, m); }, 1, 60));
}

INSTANTIATE_TEST_SUITE_P(
    Sources, FlowMarking,
    ::testing::Values(Marking{"defaults", "", {-1, -1, -1}, {46, 18, 10}},
                      Marking{"env", "40,20,10", {-1, -1, -1}, {40, 20, 10}},
                      // The struct overrides the environment, field by field.
                      Marking{"config", "40,20,10", {34, 26, 12}, {34, 26, 12}},
                      Marking{"partialconfig", "40,20,10", {-1, 26, -1}, {40, 26, 10}},
                      Marking{"off", "0,0,0", {-1, -1, -1}, {0, 0, 0}}),
    [](const auto& info) { return std::string(info.param.name); });

// IPv6 sockets carry the mark in the traffic class; DSCP 0 leaves a socket
// as the kernel made it.  (No connection needed: the options stick to the socket.)
TEST(MarkSocket, Ipv6TrafficClassAndUnmarked) {
  int fd6 = socket(AF_INET6, SOCK_STREAM, 0);
  ASSERT_GE(fd6, 0);
  ASSERT_EQ(tern::markSocket(fd6, 46, 6), ternSuccess);
  EXPECT_EQ(sockInt(fd6, IPPROTO_IPV6, IPV6_TCLASS), 0xb8);
  EXPECT_EQ(sockInt(fd6, SOL_SOCKET, SO_PRIORITY), 6);
  close(fd6);
  int fd4 = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(tern::markSocket(fd4, 0, 6), ternSuccess);
  EXPECT_EQ(sockInt(fd4, IPPROTO_IP, IP_TOS), 0);
  EXPECT_EQ(sockInt(fd4, SOL_SOCKET, SO_PRIORITY), 0);
  close(fd4);
}

// A one-rank communicator is enough to check what is refused (no sockets).
ternResult_t initOne(const ternConfig_t* cfg) {
  ternUniqueId id;
  if (ternGetUniqueId(&id) != ternSuccess) return ternInternalError;
  ternComm_t comm = nullptr;
  ternResult_t r = ternCommInitRankConfig(&comm, 1, id, 0, cfg);
  if (comm) ternCommDestroy(comm);
  return r;
}

// Init refused with a sentence that says `says`, with `var` set to `value`
// (nullptr: left unset) and the config struct cfg.
void expectEnvRefused(const char* var, const char* value, const ternConfig_t* cfg, const char* says) {
  if (value) setenv(var, value, 1);
  ternResult_t r = initOne(cfg);
  unsetenv(var);
  EXPECT_EQ(r, ternInvalidArgument) << var << "=" << (value ? value : "(unset), config");
  std::string why = ternGetLastError(nullptr);
  EXPECT_NE(why.find(says), std::string::npos) << why;
}

void expectRefused(const char* dscpEnv, const ternConfig_t* cfg, const char* says) {
  expectEnvRefused("TERN_FLOW_DSCP", dscpEnv, cfg, says);
}

TEST(FlowDscp, BadValuesAreRefusedWithASentence) {
  expectRefused("46,18", nullptr, "has 2 values for 3 flow classes");
  expectRefused("46,18,10,0", nullptr, "has 4 values for 3 flow classes");
  expectRefused("46,18,64", nullptr, "DSCP 64, not in 0..63");
  expectRefused("46,-1,8", nullptr, "DSCP -1, not in 0..63");
  expectRefused("ef,af21,cs1", nullptr, "not a comma-separated list of integers");
  expectRefused("46,,8", nullptr, "not a comma-separated list of integers");
  ternConfig_t cfg = TERN_CONFIG_INITIALIZER;
  cfg.trafficClass[3] = 10;  // only 3 classes
  expectRefused(nullptr, &cfg, "config->trafficClass[3] is set but there are only 3 flow classes");
  cfg = TERN_CONFIG_INITIALIZER;
  cfg.trafficClass[0] = 99;
  expectRefused(nullptr, &cfg, "DSCP 99 of flow class 0");
  cfg = TERN_CONFIG_INITIALIZER;
  cfg.flowClasses = 2;  // the environment's list has 3 values: ambiguous
  expectRefused("46,18,10", &cfg, "has 3 values for 2 flow classes");
  cfg = TERN_CONFIG_INITIALIZER;
  cfg.flowClasses = 9;
  expectRefused(nullptr, &cfg, "config->flowClasses: flow classes 9 is not in 1..8");
  // Accepted: two classes with their own list; a struct that sets every
  // class never reads the (bad) environment.
  setenv("TERN_FLOW_DSCP", "46,8", 1);
  cfg = TERN_CONFIG_INITIALIZER;
  cfg.flowClasses = 2;
  EXPECT_EQ(initOne(&cfg), ternSuccess) << ternGetLastError(nullptr);
  setenv("TERN_FLOW_DSCP", "garbage", 1);
  cfg.trafficClass[0] = 46;
  cfg.trafficClass[1] = 8;
  EXPECT_EQ(initOne(&cfg), ternSuccess) << ternGetLastError(nullptr);
  unsetenv("TERN_FLOW_DSCP");
}

// UCX (IB / RoCE): one context per flow class, each made with its class's
// UCX_IB_SL and UCX_IB_TRAFFIC_CLASS, read back from the config each context
// was made from (ucp_config_print).  IB itself cannot run here: this checks
// what UCX is given, over ucx-tcp and ucx-sm; the traffic class defaults to
// the class's DSCP in the TOS byte's place.
std::string ibLine(const char* key, int v) { return std::string(key) + "=" + std::to_string(v) + "\n"; }

int checkUcxContexts(RankCtx& ctx, const int* sl, const int* tc) {
  ternComm_t comm = ctx.comm(0);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  const int peer = 1 - ctx.rank;
  int fails = 0;
  std::string seen[3];
  for (int level = 0; level < TERN_PRIORITY_LEVELS; ++level) {
    float x = 1;
    ternSetPriority(level);
    if (ternAllReduce(&x, &x, 1, ternFloat32, ternSum, comm, nullptr) != ternSuccess || x != 2)
      fails += failf(ctx, "level %d allreduce: %s", level, ternGetLastError(comm));
    int k = tern::flowClassOf(level, 3);
    tern::Conn* c = comm->table->conn(peer, level);
    std::string s = c->endpointSettings();
    // The last value set wins in UCX's list: look for ours as the last of
    // its key (-1: the key must not be set).
    for (auto kv : {std::make_pair("IB_SL", sl[k]), std::make_pair("IB_TRAFFIC_CLASS", tc[k])}) {
      size_t at = s.rfind(std::string("\n") + kv.first + "=");
      bool ok = kv.second < 0 ? at == std::string::npos
                              : at != std::string::npos &&
                                    !s.compare(at + 1, ibLine(kv.first, kv.second).size(), ibLine(kv.first, kv.second));
      if (!ok)
        fails += failf(ctx, "level %d (class %d): want %s=%d in its context's config:\n%s", level, k,
                       kv.first, kv.second, s.c_str());
    }
    if (s.find("tern flow class " + std::to_string(k) + "\n") == std::string::npos)
      fails += failf(ctx, "level %d: not on class %d's context", level, k);
    if (seen[k].empty()) seen[k] = s;
    else if (seen[k] != s) fails += failf(ctx, "levels of class %d on different contexts", k);
  }
  ternSetPriority(TERN_PRIORITY_DEFAULT);
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

#ifdef TERN_TEST_UCX
class UcxClasses : public ::testing::TestWithParam<std::string> {};

TEST_P(UcxClasses, EachClassContextHasItsServiceLevelAndTrafficClass) {
  // Unset, the traffic class is the class's DSCP << 2, given to UCX only on
  // a host with RDMA (elsewhere no interface uses it).
  const bool rdma = tern::hostHasActiveRdma();
  const int sl[3] = {5, 3, 1}, tc[3] = {rdma ? 46 << 2 : -1, rdma ? 18 << 2 : -1, rdma ? 10 << 2 : -1};
  expectAllRanksOk(runRanks(2, transportEnv(GetParam(), {{"TERN_UCX_IB_SL", "5,3,1"}}),
                            [&](RankCtx& c) { return checkUcxContexts(c, sl, tc); }, 1, 60));
  const int tc2[3] = {200, 100, 0};
  expectAllRanksOk(runRanks(2, transportEnv(GetParam(), {{"TERN_UCX_IB_SL", "5,3,1"},
                                                         {"TERN_UCX_IB_TRAFFIC_CLASS", "200,100,0"}}),
                            [&](RankCtx& c) { return checkUcxContexts(c, sl, tc2); }, 1, 60));
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxClasses, ::testing::Values("ucx-tcp", "ucx-sm"),
                         [](const auto& info) { return testName(info.param); });
#endif

// The resolved settings per class: traffic class from the DSCP table unless
// set, or UCX's own variable is, or marking is off; service level only where set.
TEST(UcxIbSettings, TrafficClassFollowsTheDscpTable) {
  auto resolved = [](int level) {
    tern::Config cfg = tern::readConfig();
    EXPECT_EQ(tern::resolveConfig(nullptr, 2, &cfg), ternSuccess) << ternGetLastError(nullptr);
    return tern::flowMarkOf(cfg, level);
  };
  EXPECT_EQ(resolved(0).ibTrafficClass, 46 << 2);
  EXPECT_EQ(resolved(3).ibTrafficClass, 18 << 2);
  EXPECT_EQ(resolved(7).ibTrafficClass, 10 << 2);
  EXPECT_EQ(resolved(0).ibSl, -1);
  setenv("TERN_FLOW_DSCP", "40,0,10", 1);
  EXPECT_EQ(resolved(0).ibTrafficClass, 160);
  EXPECT_EQ(resolved(3).ibTrafficClass, -1);  // unmarked class: UCX's own
  setenv("UCX_IB_TRAFFIC_CLASS", "96", 1);
  EXPECT_EQ(resolved(0).ibTrafficClass, -1);  // the user's UCX variable applies to all
  setenv("TERN_UCX_IB_TRAFFIC_CLASS", "1,2,3", 1);
  setenv("TERN_UCX_IB_SL", "7,8,9", 1);
  EXPECT_EQ(resolved(3).ibTrafficClass, 2);  // tern's own list wins
  EXPECT_EQ(resolved(7).ibSl, 9);
  for (const char* v : {"TERN_FLOW_DSCP", "UCX_IB_TRAFFIC_CLASS", "TERN_UCX_IB_TRAFFIC_CLASS", "TERN_UCX_IB_SL"})
    unsetenv(v);
}

TEST(UcxIbSettings, BadValuesAreRefusedWithASentence) {
  auto refused = [](const char* var, const char* value, const char* says) {
    expectEnvRefused(var, value, nullptr, says);
  };
  refused("TERN_UCX_IB_SL", "1,2,16", "TERN_UCX_IB_SL=\"1,2,16\" has IB service level 16, not in 0..15");
  refused("TERN_UCX_IB_SL", "1,2", "has 2 values for 3 flow classes");
  refused("TERN_UCX_IB_SL", "high,1,0", "not a comma-separated list of integers");
  refused("TERN_UCX_IB_TRAFFIC_CLASS", "184,72,256", "has IB traffic class 256, not in 0..255");
  refused("TERN_UCX_IB_TRAFFIC_CLASS", "184,-1,32", "has IB traffic class -1, not in 0..255");
  setenv("TERN_UCX_IB_SL", "0,0,15", 1);
  EXPECT_EQ(initOne(nullptr), ternSuccess) << ternGetLastError(nullptr);
  unsetenv("TERN_UCX_IB_SL");
}

// Statistics per class: a level-0 transfer shows in class 0, a level-7 one
// in class 2 (3 classes), and neither in the other class.
int sendAtLevel(ternComm_t comm, int rank, int level, std::vector<char>& buf) {
  ternSetPriority(level);
  ternResult_t r = rank == 0 ? ternSend(buf.data(), buf.size(), ternInt8, 1, comm, nullptr)
                             : ternRecv(buf.data(), buf.size(), ternInt8, 0, comm, nullptr);
  ternSetPriority(TERN_PRIORITY_DEFAULT);
  return r;
}

int statsBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  const size_t n = 4 << 20;
  std::vector<char> buf(n, 1);
  ternFlowStats_t s0{}, s1{}, s2{};
  s0.size = s1.size = s2.size = sizeof s0;
  int fails = 0;
  if (ternCommGetFlowStats(comm, &s0) || sendAtLevel(comm, ctx.rank, 0, buf) ||
      ternCommGetFlowStats(comm, &s1) || sendAtLevel(comm, ctx.rank, 7, buf) ||
      ternCommGetFlowStats(comm, &s2))
    return failf(ctx, "transfer or stats failed: %s", ternGetLastError(comm));
  auto moved = [&](const ternFlowStats_t& a, const ternFlowStats_t& b, int k) {
    return ctx.rank == 0 ? b.bytesSent[k] - a.bytesSent[k] : b.bytesRecv[k] - a.bytesRecv[k];
  };
  if (s1.flowClasses != 3 || s1.dscp[0] != 46 || s1.dscp[2] != 10)
    fails += failf(ctx, "classes %d, DSCP %d/%d", s1.flowClasses, s1.dscp[0], s1.dscp[2]);
  // The descriptor travels with the payload: a little more than n.
  if (moved(s0, s1, 0) < n || moved(s0, s1, 2) != 0 || moved(s0, s1, 1) != 0)
    fails += failf(ctx, "level 0: class 0 moved %llu, class 1 %llu, class 2 %llu",
                   moved(s0, s1, 0), moved(s0, s1, 1), moved(s0, s1, 2));
  if (moved(s1, s2, 2) < n || moved(s1, s2, 0) != 0)
    fails += failf(ctx, "level 7: class 2 moved %llu, class 0 %llu", moved(s1, s2, 2), moved(s1, s2, 0));
  ternCommStats_t all;
  ternCommGetStats(comm, &all);
  unsigned long long sum = 0;
  for (int k = 0; k < 3; ++k) sum += ctx.rank == 0 ? s2.bytesSent[k] : s2.bytesRecv[k];
  if (sum != (ctx.rank == 0 ? all.bytesSent : all.bytesRecv))
    fails += failf(ctx, "classes sum to %llu, the total is %llu", sum,
                   ctx.rank == 0 ? all.bytesSent : all.bytesRecv);
  // An older caller's struct (ends before the byte counters) is filled as far as it reaches.
  ternFlowStats_t old;
  memset(&old, 0xab, sizeof old);
  old.size = offsetof(ternFlowStats_t, bytesSent);
  if (ternCommGetFlowStats(comm, &old) || old.flowClasses != 3 || old.bytesSent[0] != 0xababababababababull)
    fails += failf(ctx, "an older struct was not filled as far as it reaches");
  old.size = 1;
  if (ternCommGetFlowStats(comm, &old) != ternInvalidArgument)
    fails += failf(ctx, "a size too small was accepted");
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

class FlowStats : public ::testing::TestWithParam<std::string> {};

TEST_P(FlowStats, EachClassCountsOnlyWhatItCarried) {
  expectAllRanksOk(runRanks(2, transportEnv(GetParam()), statsBody, 1, 60));
}

INSTANTIATE_TEST_SUITE_P(Transports, FlowStats, ::testing::ValuesIn(testTransports()),
                         [](const auto& info) { return testName(info.param); });

// A peer killed while operations of every class wait on it: all of them
// fail within the timeout, not only the class whose connection broke first.
// The same while the connections are still opening (transport/conn_table.h):
// a peer killed before anything opened, and one that stays silent (stopped:
// its control socket stays open, nothing answers).
enum class Fate { DiesLater, DiesAtOnce, Stalls };

std::string stallPidFile() { return "/tmp/tern_flows_stall." + std::to_string(getppid()); }

// Rank 1's part: it never returns.
void meetFate(Fate f) {
  if (f == Fate::DiesLater) usleep(300 * 1000);
  if (f != Fate::Stalls) raise(SIGKILL);
  std::ofstream(stallPidFile()) << getpid() << "\n";
  raise(SIGSTOP);  // rank 0 kills it once it has seen its operations fail
}

int deadPeerBody(RankCtx& ctx, Fate fate) {
  ternComm_t comm = ctx.comm(0);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  if (ctx.rank == 1) meetFate(fate);
  const double timeout = atof(getenv("TERN_TIMEOUT"));
  std::vector<char> a(1 << 20), b(1 << 20), c(1 << 20);
  auto t0 = std::chrono::steady_clock::now();
  ternRequest_t req[3] = {};
  ternResult_t issued[3];  // a communicator that failed already refuses new work at once
  const int levels[3] = {0, 3, 7};  // one per class
  std::vector<char>* bufs[3] = {&a, &b, &c};
  for (int i = 0; i < 3; ++i) {
    ternSetPriority(levels[i]);
    ternGroupStart();
    issued[i] = ternRecv(bufs[i]->data(), bufs[i]->size(), ternInt8, 1, comm, nullptr);
    ternResult_t e = ternGroupEndAsync(&req[i]);
    if (issued[i] == ternSuccess) issued[i] = e;
  }
  ternSetPriority(TERN_PRIORITY_DEFAULT);
  int fails = 0;
  for (int i = 0; i < 3; ++i) {
    ternResult_t r = issued[i] != ternSuccess ? issued[i] : ternRequestWait(req[i]);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if ((r != ternRemoteError && r != ternTimeout) || secs > timeout + 2)
      fails += failf(ctx, "level %d: %s after %.1f s", levels[i], ternGetErrorString(r), secs);
  }
  if (fate == Fate::Stalls) {
    int pid = 0;
    std::ifstream(stallPidFile()) >> pid;
    if (pid > 0) kill(pid, SIGKILL);
    unlink(stallPidFile().c_str());
  }
  ternCommAbort(comm);
  return fails ? 1 : 0;
}

void expectRank1Killed(const RunResult& r) {
  EXPECT_FALSE(r.timedOut);
  ASSERT_EQ(r.exitCodes.size(), 2u);
  EXPECT_EQ(r.exitCodes[0], 0);
  EXPECT_EQ(r.exitCodes[1], 128 + SIGKILL);
}

TEST(FlowFailure, DeadPeerFailsOperationsOfEveryClassWithinTheTimeout) {
  expectRank1Killed(runRanks(2, {{"TERN_TRANSPORT", "tcp"}, {"TERN_TIMEOUT", "4"}},
                             [](RankCtx& c) { return deadPeerBody(c, Fate::DiesLater); }, 1, 60));
}

class OpeningFailure : public ::testing::TestWithParam<std::string> {};

// Rank 0's receive from a stalled rank 1 is still making the pair's control
// socket (rank 1's listener takes the dial, nothing answers it) when a
// watchdog thread aborts: the abort and the receive return at once, not
// when the dial would time out (TERN_TIMEOUT 30).
int abortWhileDiallingBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  if (ctx.rank == 1) meetFate(Fate::Stalls);
  double abortSecs = 0;
  std::thread watchdog([&] {
    usleep(300 * 1000);
    auto t0 = std::chrono::steady_clock::now();
    ternCommAbort(comm);
    abortSecs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  std::vector<char> a(1 << 16);
  auto t0 = std::chrono::steady_clock::now();
  ternResult_t r = ternRecv(a.data(), a.size(), ternInt8, 1, comm, nullptr);
  const double recvSecs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  watchdog.join();
  int pid = 0;
  std::ifstream(stallPidFile()) >> pid;
  if (pid > 0) kill(pid, SIGKILL);
  unlink(stallPidFile().c_str());
  if (r == ternSuccess || recvSecs > 3 || abortSecs > 2)
    return failf(ctx, "receive %s after %.1f s, abort took %.1f s", ternGetErrorString(r), recvSecs, abortSecs);
  return 0;
}

TEST_P(OpeningFailure, AbortEndsADialToAStalledPeerAtOnce) {
  expectRank1Killed(runRanks(2, transportEnv(GetParam(), {{"TERN_TIMEOUT", "30"}}), abortWhileDiallingBody, 1, 60));
}

TEST_P(OpeningFailure, DeadPeerFailsOpeningsOfEveryClassWithinTheTimeout) {
  expectRank1Killed(runRanks(2, transportEnv(GetParam(), {{"TERN_TIMEOUT", "2"}}),
                             [](RankCtx& c) { return deadPeerBody(c, Fate::DiesAtOnce); }, 1, 60));
}

TEST_P(OpeningFailure, SilentPeerFailsOpeningsOfEveryClassWithinTheTimeout) {
  expectRank1Killed(runRanks(2, transportEnv(GetParam(), {{"TERN_TIMEOUT", "2"}}),
                             [](RankCtx& c) { return deadPeerBody(c, Fate::Stalls); }, 1, 60));
}

INSTANTIATE_TEST_SUITE_P(Transports, OpeningFailure, ::testing::ValuesIn(testTransports()),
                         [](const auto& info) { return testName(info.param); });

// TERN_TRACE: each rank writes valid JSON whose events show an urgent
// allreduce issued after a bulk one and completing before it.
int traceBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm(0);
  if (!comm) return failf(ctx, "init: %s", ternGetLastError(nullptr));
  std::vector<float> bulk(32 << 20, 1.0f), urgent(1 << 16, 1.0f);  // 128 MiB, 256 KiB
  ternRequest_t req;
  ternSetPriority(7);
  ternGroupStart();
  ternAllReduce(bulk.data(), bulk.data(), bulk.size(), ternFloat32, ternSum, comm, nullptr);
  ternGroupEndAsync(&req);
  usleep(20 * 1000);  // the bulk one is under way
  ternSetPriority(0);
  ternResult_t u = ternAllReduce(urgent.data(), urgent.data(), urgent.size(), ternFloat32, ternSum,
                                 comm, nullptr);
  ternSetPriority(TERN_PRIORITY_DEFAULT);
  ternResult_t b = ternRequestWait(req);
  ternCommDestroy(comm);
  return u || b ? failf(ctx, "allreduces failed") : 0;
}

struct TracedOp {
  std::string kind;
  int level = -1, flowClass = -1;
  double bytes = 0, issue = 0, start = 0, end = 0;
};

std::vector<TracedOp> readTrace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  using namespace tern;
  Json doc = parseJson(text.str(), path);  // throws when not valid JSON
  std::vector<TracedOp> ops;
  for (const Json& e : expectArray(member(doc, "traceEvents", "trace"), "traceEvents").array) {
    if (expectString(member(e, "ph", "event"), "ph") != "X") continue;
    const Json& a = member(e, "args", "event");
    TracedOp op;
    op.kind = expectString(member(a, "kind", "args"), "kind");
    op.level = static_cast<int>(expectNumber(member(a, "level", "args"), "level"));
    op.flowClass = static_cast<int>(expectNumber(member(a, "flow_class", "args"), "flow_class"));
    op.bytes = expectNumber(member(a, "bytes", "args"), "bytes");
    op.issue = expectNumber(member(a, "issue_us", "args"), "issue_us");
    op.start = expectNumber(member(a, "start_us", "args"), "start_us");
    op.end = expectNumber(member(a, "end_us", "args"), "end_us");
    ops.push_back(op);
  }
  return ops;
}

TEST(FlowTrace, UrgentWorkIssuedAfterBulkCompletesBeforeIt) {
  std::string spec = "/tmp/tern_trace_" + std::to_string(getpid()) + ".%r.json";
  expectAllRanksOk(runRanks(2, {{"TERN_TRANSPORT", "tcp"}, {"TERN_TRACE", spec}}, traceBody, 1, 120));
  for (int rank = 0; rank < 2; ++rank) {
    std::string path = "/tmp/tern_trace_" + std::to_string(getpid()) + "." + std::to_string(rank) + ".json";
    std::vector<TracedOp> ops;
    ASSERT_NO_THROW(ops = readTrace(path)) << path;
    unlink(path.c_str());
    const TracedOp *bulk = nullptr, *urgent = nullptr;
    for (const TracedOp& op : ops) {
      if (op.kind == "allreduce" && op.level == 7) bulk = &op;
      if (op.kind == "allreduce" && op.level == 0) urgent = &op;
    }
    ASSERT_TRUE(bulk && urgent) << "rank " << rank << ": " << ops.size() << " events";
    EXPECT_EQ(bulk->bytes, 128.0 * (1 << 20));
    EXPECT_EQ(urgent->flowClass, 0);
    EXPECT_EQ(bulk->flowClass, 2);
    EXPECT_LE(bulk->issue, bulk->start);
    EXPECT_LE(bulk->start, bulk->end);
    EXPECT_GT(urgent->issue, bulk->issue);
    EXPECT_LT(urgent->end, bulk->end) << "the urgent allreduce did not overtake the bulk one";
  }
}

// An aborted communicator writes its trace too (what ran before the abort).
TEST(FlowTrace, AbortWritesTheTrace) {
  std::string spec = "/tmp/tern_trace_abort_" + std::to_string(getpid()) + ".json";
  setenv("TERN_TRACE", spec.c_str(), 1);
  ternUniqueId id;
  ASSERT_EQ(ternGetUniqueId(&id), ternSuccess);
  ternComm_t comm = nullptr;
  ASSERT_EQ(ternCommInitRank(&comm, 1, id, 0), ternSuccess);
  unsetenv("TERN_TRACE");
  std::vector<float> x(1024, 1.0f);
  ternSetPriority(2);
  ASSERT_EQ(ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, ternSum, comm, nullptr), ternSuccess);
  ternSetPriority(TERN_PRIORITY_DEFAULT);
  ASSERT_EQ(ternCommAbort(comm), ternSuccess);
  std::string path = spec + ".rank0.json";
  std::vector<TracedOp> ops;
  ASSERT_NO_THROW(ops = readTrace(path)) << path;
  unlink(path.c_str());
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].kind, "allreduce");
  EXPECT_EQ(ops[0].level, 2);
  EXPECT_EQ(ops[0].flowClass, 1);
  EXPECT_EQ(ops[0].bytes, 4096.0);
}

}  // namespace
