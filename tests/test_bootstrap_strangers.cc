// Strangers at the bootstrap root: real processes and sockets.  Idle and
// slow-drip connections must not delay or fail a forming job; the root
// listens only on the address TERN_ROOT names; a flood of bad-secret
// connections costs a few counted log lines.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "harness.h"

using namespace terntest;

namespace {

constexpr const char* kSecret = "00112233445566778899aabbccddeeff";

double now() {
  // CLOCK_MONOTONIC: comparable between the processes of one host.
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One connect attempt to ip:port: the socket, or -1 with errno set.
int connectTo(const char* ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

// Connects once the listener is up (rank 0 starts it), or -1 after `sec`.
int connectWhenUp(const char* ip, int port, double sec) {
  double until = now() + sec;
  for (;;) {
    int fd = connectTo(ip, port);
    if (fd >= 0 || now() > until) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Reads exactly n bytes within 5 s; false on close, error or timeout.
bool readFor(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  double until = now() + 5;
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 100) <= 0) {
      if (now() > until) return false;
      continue;
    }
    ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Shared between the test process and its children (rank processes and the
// stranger), so rank timings and the strangers' state can be compared.
struct Shared {
  std::atomic<int> strangersReady;
  double start[8], formed[8];
};

Shared* makeShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) Shared{};
}

bool waitFlag(const std::atomic<int>& f, double sec) {
  double until = now() + sec;
  while (!f.load()) {
    if (now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void setRankEnv(int rank, int nranks) {
  setenv("TERN_RANK", std::to_string(rank).c_str(), 1);
  setenv("TERN_NRANKS", std::to_string(nranks).c_str(), 1);
}

// Joins the job from the environment and checks one allreduce.
int joinAndCheck(RankCtx& c, Shared* sh) {
  setRankEnv(c.rank, c.nranks);
  if (sh) sh->start[c.rank] = now();
  ternComm_t comm;
  if (ternCommInitFromEnv(&comm) != ternSuccess)
    return failf(c, "init failed: %s", ternGetLastError(nullptr));
  if (sh) sh->formed[c.rank] = now();
  long x = c.rank + 1;
  ternResult_t r = ternAllReduce(&x, &x, 1, ternInt64, ternSum, comm, nullptr);
  ternCommDestroy(comm);
  if (r != ternSuccess || x != static_cast<long>(c.nranks) * (c.nranks + 1) / 2)
    return failf(c, "allreduce gave %ld", x);
  return 0;
}

// The stranger process: `idle` connections that never send, `drip` ones that
// send a byte every 200 ms, all held open until it is killed.
pid_t startStrangers(int port, int idle, int drip, Shared* sh) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  std::vector<int> fds;
  for (int i = 0; i < idle + drip; ++i) {
    int fd = connectWhenUp("127.0.0.1", port, 30);
    if (fd < 0) _exit(1);
    fds.push_back(fd);
  }
  sh->strangersReady.store(1);
  for (int t = 0; t < 600; ++t) {  // 120 s at most; the test kills us long before
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int i = idle; i < idle + drip; ++i) (void)!send(fds[i], "x", 1, MSG_NOSIGNAL);
  }
  _exit(0);
}

void stopStrangers(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);  // may already be reaped by runRanks: then ECHILD, fine
}

TEST(BootstrapStrangers, IdleAndSlowDripConnectionsDoNotDelayTheJob) {
  const int port = tern::freeLoopbackPort(), n = 3;
  Shared* sh = makeShared();
  ASSERT_NE(sh, nullptr);
  pid_t strangers = startStrangers(port, 8, 8, sh);
  std::map<std::string, std::string> env = {{"TERN_ROOT", "127.0.0.1:" + std::to_string(port)},
                                            {"TERN_SECRET", kSecret},
                                            {"TERN_TIMEOUT", "30"}};
  RunResult r = runRanks(n, env, [&](RankCtx& c) {
    // Rank 0 hosts the root; the others start once all 16 strangers hold
    // connections to it (idle ones used to stall the root 10 s each).
    if (c.rank > 0 && !waitFlag(sh->strangersReady, 30))
      return failf(c, "the strangers never connected");
    return joinAndCheck(c, sh);
  }, 0, 90);
  stopStrangers(strangers);
  expectAllRanksOk(r);
  double lastStart = 0, lastFormed = 0;
  for (int i = 1; i < n; ++i) lastStart = std::max(lastStart, sh->start[i]);
  for (int i = 0; i < n; ++i) lastFormed = std::max(lastFormed, sh->formed[i]);
  double took = lastFormed - lastStart;
  printf("job formed %.3f s after its last rank started, 16 strangers connected\n", took);
  EXPECT_LT(took, 3.0) << "16 idle/slow strangers at the root delayed the job";
  munmap(sh, sizeof *sh);
}

// The same at a rank's mesh listener: rank 1 reads rank 0's listening
// address from its INFO log and parks idle and dripping strangers there
// before it joins; rank 0 accepts rank 1's mesh connection at once.
TEST(BootstrapStrangers, StrangersAtAMeshListenerDoNotDelayTheJob) {
  const int port = tern::freeLoopbackPort();
  std::string log = "/tmp/tern_mesh_" + std::to_string(getpid()) + ".log";
  Shared* sh = makeShared();
  ASSERT_NE(sh, nullptr);
  std::map<std::string, std::string> env = {{"TERN_ROOT", "127.0.0.1:" + std::to_string(port)},
                                            {"TERN_SECRET", kSecret},
                                            {"TERN_SOCKET_IFNAME", "lo"},
                                            {"TERN_TIMEOUT", "30"}};
  RunResult r = runRanks(2, env, [&](RankCtx& c) {
    if (c.rank == 0) {
      setenv("TERN_DEBUG", "INFO", 1);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 2);
      close(fd);
      return joinAndCheck(c, sh);
    }
    std::regex listening("rank 0/2 listening on 127\\.0\\.0\\.1:([0-9]+)");
    int meshPort = -1;
    for (double until = now() + 30; meshPort < 0 && now() < until;) {
      std::ifstream f(log);
      std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      std::smatch m;
      if (std::regex_search(all, m, listening)) meshPort = std::stoi(m[1]);
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (meshPort < 0) return failf(c, "rank 0 never logged its mesh listener");
    std::vector<int> strangers;
    for (int i = 0; i < 8; ++i) {
      int fd = connectTo("127.0.0.1", meshPort);
      if (fd < 0) return failf(c, "cannot connect to rank 0's mesh listener: %s", strerror(errno));
      strangers.push_back(fd);
    }
    std::atomic<bool> stop{false};
    std::thread drip([&] {  // half of them send a byte every 200 ms
      while (!stop) {
        for (int i = 0; i < 4; ++i) (void)!send(strangers[i], "x", 1, MSG_NOSIGNAL);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
    int res = joinAndCheck(c, sh);
    stop = true;
    drip.join();
    for (int fd : strangers) close(fd);
    return res;
  }, 0, 90);
  if (r.timedOut || r.exitCodes[0] != 0) {  // rank 0's stderr went to the log
    std::ifstream f(log);
    printf("rank 0's log:\n%s\n", std::string((std::istreambuf_iterator<char>(f)),
                                              std::istreambuf_iterator<char>()).c_str());
  }
  unlink(log.c_str());
  expectAllRanksOk(r);
  double took = std::max(sh->formed[0], sh->formed[1]) - sh->start[1];
  printf("job formed %.3f s after rank 1 started, 8 strangers at rank 0's mesh listener\n", took);
  EXPECT_LT(took, 3.0) << "strangers at a mesh listener delayed the job";
  munmap(sh, sizeof *sh);
}

// The root listens on the address TERN_ROOT names (127.0.0.1): another local
// address (127.0.0.2, also loopback) is refused; TERN_ROOT_BIND=0.0.0.0 is
// the explicit way to listen on all of them.
void expectRootBinding(const char* rootBind, bool otherAddressAccepted) {
  const int port = tern::freeLoopbackPort();
  std::map<std::string, std::string> env = {{"TERN_ROOT", "127.0.0.1:" + std::to_string(port)},
                                            {"TERN_SECRET", kSecret},
                                            {"TERN_TIMEOUT", "30"}};
  if (rootBind) env["TERN_ROOT_BIND"] = rootBind;
  expectAllRanksOk(runRanks(2, env, [&](RankCtx& c) {
    if (c.rank == 1) {
      int fd = connectWhenUp("127.0.0.1", port, 30);
      if (fd < 0) return failf(c, "the root never listened on 127.0.0.1:%d", port);
      close(fd);
      fd = connectTo("127.0.0.2", port);
      int e = errno;
      if (fd >= 0) close(fd);
      if ((fd >= 0) != otherAddressAccepted)
        return failf(c, "connect to 127.0.0.2:%d %s (TERN_ROOT_BIND=%s)", port,
                     fd >= 0 ? "was accepted" : strerror(e), rootBind ? rootBind : "unset");
      if (fd < 0 && e != ECONNREFUSED)
        return failf(c, "connect to 127.0.0.2 failed with %s, not refused", strerror(e));
    }
    return joinAndCheck(c, nullptr);
  }, 0, 90));
}

TEST(BootstrapStrangers, RootListensOnlyOnTheNamedAddress) { expectRootBinding(nullptr, false); }

TEST(BootstrapStrangers, RootBindAllAddressesOnlyWhenAsked) { expectRootBinding("0.0.0.0", true); }

// A tern peer without the secret: the hello read, a well-formed proof with a
// wrong MAC (auth.cc's wire layout: magic "ternAUTH", rank, kind, nonce, MAC).
bool sendBadProof(int port) {
  int fd = connectTo("127.0.0.1", port);
  if (fd < 0) return false;
  char hello[24];
  bool ok = readFor(fd, hello, sizeof hello);
  struct { uint64_t magic; int32_t rank, kind; uint8_t nonce[16]; uint64_t mac; } proof{};
  proof.magic = 0x7465726e41555448ull;
  proof.rank = 1;
  proof.kind = 1;  // a bootstrap connection
  proof.mac = 0x0123456789abcdefull;
  ok = ok && send(fd, &proof, sizeof proof, MSG_NOSIGNAL) == sizeof proof;
  char byte;
  ok = ok && !readFor(fd, &byte, 1);  // the root closes without answering
  close(fd);
  return ok;
}

int countWarnLines(const std::string& log, std::string* all) {
  std::ifstream f(log);
  std::string line;
  int warns = 0;
  while (std::getline(f, line)) {
    *all += line + "\n";
    warns += line.find("TERN WARN") != std::string::npos;
  }
  return warns;
}

TEST(BootstrapStrangers, FloodOfBadSecretsLogsAFewCountedLines) {
  const int port = tern::freeLoopbackPort(), flood = 300;
  std::string log = "/tmp/tern_flood_" + std::to_string(getpid()) + ".log";
  std::map<std::string, std::string> env = {{"TERN_ROOT", "127.0.0.1:" + std::to_string(port)},
                                            {"TERN_SECRET", kSecret},
                                            {"TERN_TIMEOUT", "30"},
                                            {"TERN_DEBUG", "WARN"}};
  expectAllRanksOk(runRanks(2, env, [&](RankCtx& c) {
    if (c.rank == 1) {
      int fd = connectWhenUp("127.0.0.1", port, 30);  // the root is up (this probe is rejected too)
      if (fd < 0) return failf(c, "the root never listened");
      close(fd);
      for (int i = 0; i < flood; ++i)
        if (!sendBadProof(port)) return failf(c, "bad-secret connection %d was not refused", i);
      return joinAndCheck(c, nullptr);
    }
    // Rank 0 hosts the root: its stderr goes to the file we count.
    int saved = dup(2), fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    int res = joinAndCheck(c, nullptr);
    // The root thread reports the counts as it closes, just after serving the table.
    std::regex countLine("bootstrap root rejected ([0-9]+) connections? from 127\\.0\\.0\\.1 in the "
                       "last [0-9]+ s: bad secret");
    std::string all;
    int warns = 0, counted = 0;
    for (int t = 0; t < 100 && counted < flood - 1; ++t) {
      all.clear();
      warns = countWarnLines(log, &all);
      counted = 0;  // the sum of the count lines (one per 10 s while the flood lasts)
      for (std::sregex_iterator it(all.begin(), all.end(), countLine), end; it != end; ++it)
        counted += std::stoi((*it)[1]);
      if (counted < flood - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    dup2(saved, 2);
    close(saved);
    unlink(log.c_str());
    if (res) return res;
    // The first bad secret is logged on its own, the rest are counted.
    if (counted != flood - 1)
      return failf(c, "the count lines add up to %d bad secrets, not %d:\n%s", counted,
                   flood - 1, all.c_str());
    if (warns > 6) return failf(c, "%d WARN lines for %d strangers:\n%s", warns, flood, all.c_str());
    printf("%d bad-secret connections: %d WARN lines\n%s", flood, warns, all.c_str());
    return 0;
  }, 0, 120));
}

}  // namespace
