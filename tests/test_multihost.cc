// Several "hosts" on one machine: network namespaces joined by veth to a
// bridge.  Ranks are placed interleaved (host of rank r = r % 3), each
// forked rank enters its host's namespace with setns(), and the test checks
// what a multi-host job needs: hosts contiguous in the ring (so it crosses
// each host boundary once), shm inside a host and the network between
// hosts, and correct results from every collective; and, with the switch's
// port to a host shaped, that a less urgent level leaves a short queue in
// it once priorities are in use (TERN_BULK_QUEUED).  Needs root (CI is).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace terntest;

namespace {

constexpr int kHosts = 3, kRanks = 5;

int sh(const std::string& cmd) { return system((cmd + " >/dev/null 2>&1").c_str()); }

// Creates the hosts and removes them again, whatever happens in between.
struct Hosts {
  std::string prefix = "terntest" + std::to_string(getpid());
  std::string tag = std::to_string(getpid() % 100000);  // the parent's: ranks are its children
  bool ok = true;
  Hosts() {
    ok &= sh("ip netns add " + prefix + "sw") == 0;
    ok &= sh("ip netns exec " + prefix + "sw ip link add br0 type bridge") == 0;
    ok &= sh("ip netns exec " + prefix + "sw ip link set br0 up") == 0;
    for (int h = 0; h < kHosts; ++h) {
      std::string ns = name(h), a = nic(h);
      std::string b = port(h);
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
  // Host h's interface, the switch's port to it, and a command run in the switch.
  std::string nic(int h) const { return "t" + tag + "h" + std::to_string(h); }
  std::string port(int h) const { return "t" + tag + "s" + std::to_string(h); }
  std::string inSwitch(const std::string& cmd) const { return "ip netns exec " + prefix + "sw " + cmd; }
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

// ---- a less urgent level's queue in a shaped switch port ----

constexpr size_t kBulkBytes = 12 << 20;  // ~1 s through the 100 Mbit/s port

// The largest backlog (bytes) the switch port's queues held, sampled every
// 5 ms while `busy`.
size_t sampleBacklog(const std::string& cmd, const std::atomic<bool>& busy) {
  size_t most = 0;
  while (busy.load()) {
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char line[512];
      while (fgets(line, sizeof line, f))
        if (const char* b = strstr(line, "backlog ")) most = std::max<size_t>(most, strtoull(b + 8, nullptr, 10));
      pclose(f);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return most;
}

// Voluntary context switches of this process's threads named `name`, and
// of the calling thread: the wake-ups of whoever drives a blocking call.
long wakeUps(const char* name) {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  long n = u.ru_nvcsw;
  for (const std::string& dir : threadDirs(name)) {
    FILE* f = fopen((dir + "/status").c_str(), "r");
    char line[128];
    while (f && fgets(line, sizeof line, f))
      if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0) n += atol(line + 24);
    if (f) fclose(f);
  }
  return n;
}

// Rank 0 (host 0) sends kBulkBytes at level 7 to rank 1 (host 1) through
// the shaped port, after an allreduce at level 0 when `urgentFirst`; rank 0
// samples the port's backlog until rank 1 has everything (a level-0
// allreduce after the receive), prints the largest and checks it.  And
// how often the sender woke while the bound held its bytes back: poll()
// cannot see the kernel's queue drain, so the driver looks again when a
// quarter of the bound should have left at the path's rate (at 100 Mbit/s,
// every 0.5 ms at most); a fixed 100 us look-again woke it ~10,000 times a
// second, a cost ranks sharing cores pay in compute.
int bulkBody(RankCtx& ctx, const Hosts& hosts, bool urgentFirst, size_t bound) {
  if (!enterHost(hosts.name(hostOf(ctx.rank)))) return failf(ctx, "cannot enter the host's namespace");
  setenv("TERN_RANK", std::to_string(ctx.rank).c_str(), 1);
  setenv("TERN_NRANKS", std::to_string(ctx.nranks).c_str(), 1);
  ternComm_t comm;
  if (ternCommInitFromEnv(&comm) != ternSuccess) return failf(ctx, "init failed: %s", ternGetLastError(nullptr));
  int fails = 0;
  std::vector<char> buf(kBulkBytes);
  for (size_t i = 0; i < buf.size(); i += 4096) buf[i] = static_cast<char>(i / 4096 + 1);  // faulted in
  float one = 1.f, sum = 0.f;
  ternSetPriority(0);
  if (urgentFirst && (ternAllReduce(&one, &sum, 1, ternFloat32, ternSum, comm, nullptr) || sum != 2.f))
    fails += failf(ctx, "urgent allreduce wrong");
  ternSetPriority(7);
  if (ctx.rank == 0) {
    std::atomic<bool> busy{true};
    size_t most = 0;
    std::thread sampler([&] { most = sampleBacklog(hosts.inSwitch("tc -s qdisc show dev " + hosts.port(1)), busy); });
    auto t0 = std::chrono::steady_clock::now();
    const long w0 = wakeUps("tern-progress");
    if (ternSend(buf.data(), buf.size(), ternInt8, 1, comm, nullptr)) fails += failf(ctx, "send failed");
    const double sendSec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double wakesPerSec = (wakeUps("tern-progress") - w0) / sendSec;
    // The send returns once its bytes are in the kernel and the queues;
    // sample until they have drained into rank 1.
    ternSetPriority(0);
    if (ternAllReduce(&one, &sum, 1, ternFloat32, ternSum, comm, nullptr)) fails += failf(ctx, "final allreduce failed");
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    busy = false;
    sampler.join();
    printf("bulk backlog: most %zu bytes in the port (bound %zu), %.2f s; the sender woke %.0f times a second\n",
           most, bound, sec, wakesPerSec);
    if (bound && urgentFirst && wakesPerSec > 2500)
      fails += failf(ctx, "the bounded sender woke %.0f times a second (at most ~2,000 expected; a 100 us look-again: 3,600)", wakesPerSec);
    if (bound && most > bound + (128 << 10))
      fails += failf(ctx, "the port queued %zu bytes of the bulk level, over the %zu bound", most, bound);
    if (!bound && most < (1 << 20))
      fails += failf(ctx, "without a bound the port queued only %zu bytes: this bed cannot show one", most);
  } else {
    std::vector<char> in(kBulkBytes);
    if (ternRecv(in.data(), in.size(), ternInt8, 0, comm, nullptr) || in != buf)
      fails += failf(ctx, "bulk receive wrong");
    ternSetPriority(0);
    if (ternAllReduce(&one, &sum, 1, ternFloat32, ternSum, comm, nullptr)) fails += failf(ctx, "final allreduce failed");
  }
  ternCommDestroy(comm);
  return fails ? 1 : 0;
}

// Params: urgent level used first, TERN_BULK_QUEUED.  Bounded only after a
// more urgent level was used; unbounded, the same bed queues megabytes (so
// the bounded case could fail).
class BulkQueue : public ::testing::TestWithParam<std::tuple<bool, size_t>> {};

TEST_P(BulkQueue, ShapedPortHoldsAtMostTheBoundOnceUrgentLevelsAreUsed) {
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  const bool urgentFirst = std::get<0>(GetParam());
  const size_t setting = std::get<1>(GetParam()), bound = urgentFirst ? setting : 0;
  Hosts hosts;
  ASSERT_TRUE(hosts.ok) << "could not create the namespaces (iproute2 missing?)";
  // The switch's port to host 1: 100 Mbit/s with a deep FIFO, as a switch
  // or shaper with large buffers has (tcp's small-queue limit does not reach
  // into another namespace's qdisc).
  const std::string dev = " dev " + hosts.port(1);
  ASSERT_EQ(sh(hosts.inSwitch("tc qdisc add" + dev + " root handle 1: htb default 1")), 0);
  ASSERT_EQ(sh(hosts.inSwitch("tc class add" + dev + " parent 1: classid 1:1 htb rate 100mbit ceil 100mbit")), 0);
  ASSERT_EQ(sh(hosts.inSwitch("tc qdisc add" + dev + " parent 1:1 handle 10: pfifo limit 100000")), 0);
  // Hosts whose windows are already open as a long-running flow's are
  // (4 MiB socket buffers, initial windows of 2000 segments): in a one-second
  // test tcp would otherwise still be growing its window, and the queue
  // would stay short with or without the bound.
  for (int h = 0; h < 2; ++h)
    ASSERT_EQ(sh("ip netns exec " + hosts.name(h) +
                 " sh -c 'sysctl -w net.ipv4.tcp_rmem=\"4096 4194304 16777216\" &&"
                 " sysctl -w net.ipv4.tcp_wmem=\"4096 4194304 16777216\" &&"
                 " ip route change 10.233.0.0/24 dev " + hosts.nic(h) +
                 " proto kernel scope link initcwnd 2000 initrwnd 2000'"), 0);
  std::string root = Hosts::addr(0) + ":" + std::to_string(20000 + getpid() % 20000);
  std::map<std::string, std::string> env = {{"TERN_ROOT", root}, {"TERN_TIMEOUT", "30"}, {"TERN_TRANSPORT", "tcp"},
                                            {"TERN_BULK_QUEUED", std::to_string(setting)},
                                            {"TERN_SECRET", "0123456789abcdef0123456789abcdef"}};
  expectAllRanksOk(runRanks(2, env, [&](RankCtx& c) { return bulkBody(c, hosts, urgentFirst, bound); }, 0, 120));
}

INSTANTIATE_TEST_SUITE_P(Shaped, BulkQueue,
                         ::testing::Values(std::make_tuple(true, size_t{256 << 10}), std::make_tuple(true, size_t{0}),
                                           std::make_tuple(false, size_t{256 << 10})),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "UrgentUsed" : "NoUrgent") + "Bound" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
