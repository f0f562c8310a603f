// Runs a test body as N real processes (fork), each with its own
// communicator(s) made from unique ids that rank 0 creates and hands to the
// others over a pipe.  The parent waits with a deadline and kills everything
// on timeout, so a hang is a failure, never a stuck suite.
#pragma once
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sanitizers.h"
#include "tern/tern.h"

namespace terntest {

struct RankCtx {
  int rank, nranks;
  std::vector<ternUniqueId> ids;  // `nids` fresh unique ids, the same on every rank
  // Makes a communicator from ids[k] (env such as TERN_CHUNKSIZE is read now),
  // with `cfg`'s options if given.
  ternComm_t comm(int k = 0, const ternConfig_t* cfg = nullptr);
};

using Body = std::function<int(RankCtx&)>;  // returns 0 on success

struct RunResult {
  std::vector<int> exitCodes;  // per rank; 128+sig for a signal
  bool timedOut = false;
};

// Forks `nranks` processes running `body` with `env` set.  Each rank's exit
// code is its body's return value (or 1 on an exception).
RunResult runRanks(int nranks, const std::map<std::string, std::string>& env, const Body& body,
                   int nids = 1, double timeoutSec = 120);

// The transports the suites run over: "shm", "tcp", and with UCX built
// "ucx-tcp" / "ucx-sm" (TERN_TRANSPORT=ucx with UCX_TLS=tcp,self / sm,self).
std::vector<std::string> testTransports();
// Environment selecting one of them, plus `extra`.
std::map<std::string, std::string> transportEnv(const std::string& name,
                                                std::map<std::string, std::string> extra = {});

// GoogleTest expectations: no timeout, every rank exited 0.
void expectAllRanksOk(const RunResult& r);

// A transport name usable in a test name ("ucx-tcp" -> "ucx_tcp").
inline std::string testName(std::string t) {
  for (char& ch : t)
    if (ch == '-') ch = '_';
  return t;
}

// Names a (transport, nranks) test parameter "shm_2ranks", and a
// (transport, nranks, path) one "shm_2ranks_staged".
template <class Info>
std::string transportRanksName(const Info& info) {
  std::string name = testName(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
  if constexpr (std::tuple_size_v<std::decay_t<decltype(info.param)>> > 2)
    name += "_" + testName(std::get<2>(info.param));
  return name;
}

// Prints a failure message from a rank (prefixed) and returns 1.
int failf(const RankCtx& c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// CPU time (user + system) in seconds: RUSAGE_SELF, every thread of the
// process (the progress thread's too), or RUSAGE_THREAD, the caller's.
inline double cpuSeconds(int who = RUSAGE_SELF) {
  rusage u{};
  getrusage(who, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// This process's threads as /proc/self/task/<tid> folders; with `name`,
// only those whose name starts with it (tern names its threads:
// "tern-progress", "tern-completer", ...).
std::vector<std::string> threadDirs(const char* name = nullptr);

// A pipe made before the ranks fork (make it in the test, or as a global):
// one rank tells another when to go on, outside tern (when a tern call
// would itself be the thing under test, or would time out meanwhile).
struct Signal {
  int fd[2] = {-1, -1};
  Signal() {
    if (pipe(fd) != 0) {  // nothing can run without it: fail loudly, not as a wrong result later
      perror("terntest::Signal: pipe");
      abort();
    }
  }
  ~Signal() { close(fd[0]), close(fd[1]); }
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;
  void post() const { (void)!write(fd[1], "x", 1); }
  bool await() const {
    char ch;
    return read(fd[0], &ch, 1) == 1;
  }
};

}  // namespace terntest
