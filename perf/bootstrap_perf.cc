// bootstrap_perf [-n ranks] [-s idle] [-r runs]: how long a job takes to form
// (from its last rank's start to every rank's ternCommInitFromEnv returning)
// with no stranger and with `idle` idle connections held open to its root,
// and the sockets each rank holds once formed and after one ring allreduce
// (1 MiB: each rank talks to its two ring neighbours).
// Real processes: rank 0 hosts the root at TERN_ROOT; a stranger process
// connects first, the other ranks start once it has.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "tern/tern.h"

namespace {

struct Shared {
  std::atomic<int> released;  // the strangers hold their connections: ranks may start
  double start[64], formed[64];
  int socketsFormed[64], socketsAfter[64];
  int failed;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int connectWhenUp(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (double until = now() + 30; now() < until;) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

// Sockets this process holds (listeners, control and data connections).
int socketsHeld() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  for (dirent* e; d && (e = readdir(d));) {
    char link[64] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), link, sizeof link - 1) > 0 && !strncmp(link, "socket:", 7)) ++n;
  }
  if (d) closedir(d);
  return n;
}

// One 1 MiB allreduce after the job formed (a ring: two neighbours per rank).
bool ringAllreduce(ternComm_t comm) {
  static std::vector<float> buf(1 << 18, 1.0f);
  return ternAllReduce(buf.data(), buf.data(), buf.size(), ternFloat32, ternSum, comm, nullptr) == ternSuccess;
}

// Holds `idle` connections open (none: one probe, closed at once, so both
// cases start the ranks the same way: once the root listens).
void strangers(int port, int idle, Shared* sh) {
  std::vector<int> fds;
  for (int i = 0; i < std::max(idle, 1); ++i) fds.push_back(connectWhenUp(port));
  if (idle == 0) close(fds[0]);
  sh->released = 1;
  pause();  // killed when the job has formed
}

void rank(int r, int n, int port, Shared* sh) {
  setenv("TERN_RANK", std::to_string(r).c_str(), 1);
  setenv("TERN_NRANKS", std::to_string(n).c_str(), 1);
  setenv("TERN_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  setenv("TERN_SECRET", "00112233445566778899aabbccddeeff", 1);
  setenv("TERN_DEBUG", "NONE", 1);  // the probe's rejection line is not the measurement
  if (r > 0)
    while (!sh->released) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sh->start[r] = now();
  ternComm_t comm;
  if (ternCommInitFromEnv(&comm) != ternSuccess) {
    fprintf(stderr, "rank %d: %s\n", r, ternGetLastError(nullptr));
    sh->failed = 1;
    _exit(1);
  }
  sh->formed[r] = now();
  sh->socketsFormed[r] = socketsHeld();
  if (!ringAllreduce(comm)) {
    fprintf(stderr, "rank %d: %s\n", r, ternGetLastError(nullptr));
    sh->failed = 1;
  }
  sh->socketsAfter[r] = socketsHeld();
  ternCommDestroy(comm);
  _exit(0);
}

// One job: seconds from its last rank's start to formed, or -1 on failure.
double formOnce(int n, int idle, Shared* sh) {
  sh->~Shared();
  new (sh) Shared{};
  const int port = tern::freeLoopbackPort();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r)
    if ((pids.emplace_back(fork())) == 0) rank(r, n, port, sh);
  pid_t s = fork();
  if (s == 0) strangers(port, idle, sh);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  kill(s, SIGKILL);
  waitpid(s, nullptr, 0);
  if (sh->failed) return -1;
  return *std::max_element(sh->formed, sh->formed + n) -
         *std::max_element(sh->start, sh->start + n);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 3, idle = 8, runs = 5;
  for (int opt; (opt = getopt(argc, argv, "n:s:r:")) != -1;) {
    if (opt == 'n') n = atoi(optarg);
    else if (opt == 's') idle = atoi(optarg);
    else if (opt == 'r') runs = atoi(optarg);
    else {
      fprintf(stderr, "usage: %s [-n ranks] [-s idle strangers] [-r runs]\n", argv[0]);
      return 2;
    }
  }
  if (n < 2 || n > 64 || idle < 0 || runs < 1) {
    fprintf(stderr, "need 2 <= ranks <= 64, idle >= 0, runs >= 1\n");
    return 2;
  }
  auto* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  printf("# %d ranks on this host, %d runs each: job formed after its last rank started (ms)\n",
         n, runs);
  printf("%15s %10s %10s %10s\n", "idle strangers", "median", "min", "max");
  for (int k : {0, idle}) {
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) {
      double s = formOnce(n, k, sh);
      if (s < 0) return 1;
      t.push_back(s * 1e3);
    }
    std::sort(t.begin(), t.end());
    printf("%15d %10.1f %10.1f %10.1f\n", k, t[t.size() / 2], t.front(), t.back());
  }
  // The last job's sockets per rank (its stranger's are not the rank's).
  printf("# sockets per rank (most of any rank): formed %d, after a 1 MiB ring allreduce %d\n",
         *std::max_element(sh->socketsFormed, sh->socketsFormed + n),
         *std::max_element(sh->socketsAfter, sh->socketsAfter + n));
  return 0;
}
