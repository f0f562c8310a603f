// Several "hosts" on one machine: network namespaces joined by veth to a
// bridge.  Ranks are placed interleaved (host of rank r = r % 3), each
// forked rank enters its host's namespace with setns(), and the test checks
// what a multi-host job needs: hosts contiguous in the ring (so it crosses
// each host boundary once), shm inside a host and the network between
// hosts, and correct results from every collective.  Needs root (CI is).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

using namespace terntest;

namespace {

constexpr int kHosts = 3, kRanks = 5;

int sh(const std::string& cmd) { return system((cmd + " >/dev/null 2>&1").c_str()); }

// Creates the hosts and removes them again, whatever happens in between.
struct Hosts {
  std::string prefix = "terntest" + std::to_string(getpid());
  bool ok = true;
  Hosts() {
    ok &= sh("ip netns add " + prefix + "sw") == 0;
    ok &= sh("ip netns exec " + prefix + "sw ip link add br0 type bridge") == 0;
    ok &= sh("ip netns exec " + prefix + "sw ip link set br0 up") == 0;
    for (int h = 0; h < kHosts; ++h) {
      std::string ns = name(h), a = "t" + std::to_string(getpid() % 100000) + "h" + std::to_string(h);
      std::string b = "t" + std::to_string(getpid() % 100000) + "s" + std::to_string(h);
      ok &= sh("ip netns add " + ns) == 0;
      ok &= sh("ip link add " + a + " type veth peer name " + b) == 0;
      ok &= sh("ip link set " + a + " netns " + ns) == 0;
      ok &= sh("ip link set " + b + " netns " + prefix + "sw") == 0;
      ok &= sh("ip netns exec " + prefix + "sw ip link set " + b + " master br0 up") == 0;
      ok &= sh("ip netns exec " + ns + " ip addr add " + addr(h) + "/24 dev " + a) == 0;
      ok &= sh("ip netns exec " + ns + " ip link set " + a + " up") == 0;
      ok &= sh("ip netns exec " + ns + " ip link set lo up") == 0;
    }
  }
  ~Hosts() {
    for (int h = 0; h < kHosts; ++h) sh("ip netns del " + name(h));
    sh("ip netns del " + prefix + "sw");
  }
  std::string name(int h) const { return prefix + "h" + std::to_string(h); }
  static std::string addr(int h) { return "10.233.0." + std::to_string(h + 2); }
};

int hostOf(int rank) { return rank % kHosts; }

// Enters a host as `ip netns exec` does: its network namespace, and a private
// /sys showing that namespace's devices (UCX finds interfaces through it).
bool enterHost(const std::string& ns) {
  int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return false;
  close(fd);
  if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0)
    return false;
  umount2("/sys", MNT_DETACH);
  return mount(ns.c_str(), "/sys", "sysfs", 0, nullptr) == 0;
}

#ifdef TERN_TEST_UCX
constexpr bool kUcxBuilt = true;
#else
constexpr bool kUcxBuilt = false;
#endif

// An active RDMA port, read from sysfs (independently of tern's own
// rdma-core probe): only then may auto carry traffic between hosts over UCX.
bool sysfsHasActiveRdmaPort() {
  FILE* f = popen("cat /sys/class/infiniband/*/ports/*/state 2>/dev/null", "r");
  if (!f) return false;
  char line[128];
  bool active = false;
  while (fgets(line, sizeof line, f)) active = active || strstr(line, "ACTIVE") != nullptr;
  pclose(f);
  return active;
}

int multiHostBody(RankCtx& ctx, const Hosts& hosts, const std::string& transport) {
  if (!enterHost(hosts.name(hostOf(ctx.rank)))) return failf(ctx, "cannot enter the host's namespace");
  setenv("TERN_RANK", std::to_string(ctx.rank).c_str(), 1);
  setenv("TERN_NRANKS", std::to_string(ctx.nranks).c_str(), 1);
  if (transport == "mixed" && hostOf(ctx.rank) == 0) setenv("TERN_NET", "tcp", 1);
  ternComm_t comm;
  if (ternCommInitFromEnv(&comm) != ternSuccess)
    return failf(ctx, "init failed: %s", ternGetLastError(nullptr));
  int fails = 0;
  // Ring: hosts in order of their lowest rank, ranks of a host together.
  std::vector<int> ring(ctx.nranks), want;
  for (int h = 0; h < kHosts; ++h)
    for (int r = 0; r < ctx.nranks; ++r)
      if (hostOf(r) == h) want.push_back(r);
  ternCommRingOrder(comm, ring.data());
  if (ring != want) fails += failf(ctx, "ring order is not host-contiguous");
  for (int p = 0; p < ctx.nranks; ++p) {
    std::string got = ternCommPeerTransport(comm, p);
    // auto: shm inside a host, UCX between hosts when built with it and the
    // host has an active RDMA port (never here), else tcp; "mixed": host 0
    // says TERN_NET=tcp, so its pairs settle on tcp.
    bool sameHost = hostOf(p) == hostOf(ctx.rank);
    bool tcpHost = transport == "mixed" && (hostOf(p) == 0 || hostOf(ctx.rank) == 0);
    std::string expect = p == ctx.rank                                   ? "self"
                         : transport == "tcp" || transport == "ucx"      ? transport
                         : sameHost                                      ? "shm"
                         : kUcxBuilt && sysfsHasActiveRdmaPort() && !tcpHost ? "ucx"
                                                                         : "tcp";
    if (got != expect)
      fails += failf(ctx, "transport to rank %d is %s, want %s", p, got.c_str(), expect.c_str());
  }
  const size_t n = 300007;
  std::vector<float> x(n), all(n * ctx.nranks), part(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i % 13) + ctx.rank);
  auto expectSum = [&](size_t i) { return static_cast<float>(ctx.nranks * (i % 13) + ctx.nranks * (ctx.nranks - 1) / 2); };
  std::vector<float> y(n);
  if (ternAllReduce(x.data(), y.data(), n, ternFloat32, ternSum, comm, nullptr) ||
      y[n - 1] != expectSum(n - 1) || y[12345] != expectSum(12345))
    fails += failf(ctx, "allreduce wrong");
  if (ternAllGather(x.data(), all.data(), n, ternFloat32, comm, nullptr) ||
      all[3 * n + 5] != static_cast<float>(5 + 3))
    fails += failf(ctx, "allgather wrong");
  std::vector<float> big(n * ctx.nranks);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 7);
  if (ternReduceScatter(big.data(), part.data(), n, ternFloat32, ternSum, comm, nullptr) ||
      part[11] != static_cast<float>(ctx.nranks * ((ctx.rank * n + 11) % 7)))
    fails += failf(ctx, "reduce-scatter wrong");
  std::vector<float> b(n, ctx.rank == 2 ? 42.f : 0.f);
  if (ternBroadcast(b.data(), b.data(), n, ternFloat32, 2, comm, nullptr) || b[n - 1] != 42.f)
    fails += failf(ctx, "broadcast wrong");
  if (ternReduce(x.data(), y.data(), n, ternFloat32, ternSum, 4, comm, nullptr) ||
      (ctx.rank == 4 && y[7] != expectSum(7)))
    fails += failf(ctx, "reduce wrong");
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

class MultiHost : public ::testing::TestWithParam<std::string> {};

TEST_P(MultiHost, RingCrossesEachHostOnceAndResultsAreRight) {
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  Hosts hosts;
  ASSERT_TRUE(hosts.ok) << "could not create the namespaces (iproute2 missing?)";
  std::string root = Hosts::addr(0) + ":" + std::to_string(20000 + getpid() % 20000);
  std::map<std::string, std::string> env = {{"TERN_ROOT", root}, {"TERN_TIMEOUT", "30"},
                                            {"TERN_SECRET", "0123456789abcdef0123456789abcdef"}};
  if (GetParam() == "ucx") env = transportEnv("ucx-tcp", env);
  if (GetParam() == "tcp") env["TERN_TRANSPORT"] = "tcp";
  expectAllRanksOk(runRanks(kRanks, env,
                            [&](RankCtx& c) { return multiHostBody(c, hosts, GetParam()); },
                            0, 120));
}

std::vector<std::string> multiHostTransports() {
  std::vector<std::string> t = {"auto", "tcp", "mixed"};
  for (const std::string& x : testTransports())
    if (x == "ucx-tcp") t.push_back("ucx");
  return t;
}

INSTANTIATE_TEST_SUITE_P(Transports, MultiHost, ::testing::ValuesIn(multiHostTransports()),
                         [](const auto& info) { return info.param; });

}  // namespace
