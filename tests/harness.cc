#include "harness.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace terntest {

ternComm_t RankCtx::comm(int k, const ternConfig_t* cfg) {
  ternComm_t c = nullptr;
  ternResult_t r = ternCommInitRankConfig(&c, nranks, ids[k], rank, cfg);
  if (r != ternSuccess) {
    fprintf(stderr, "[rank %d] ternCommInitRank failed: %s\n", rank, ternGetLastError(nullptr));
    _exit(90);
  }
  return c;
}

int failf(const RankCtx& c, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[rank %d/%d] FAIL: %s\n", c.rank, c.nranks, msg);
  return 1;
}

static void writeAll(int fd, const void* p, size_t n) {
  const char* b = static_cast<const char*>(p);
  while (n) {
    ssize_t k = write(fd, b, n);
    if (k <= 0) _exit(91);
    b += k;
    n -= static_cast<size_t>(k);
  }
}

static void readAll(int fd, void* p, size_t n) {
  char* b = static_cast<char*>(p);
  while (n) {
    ssize_t k = read(fd, b, n);
    if (k <= 0) _exit(92);
    b += k;
    n -= static_cast<size_t>(k);
  }
}

RunResult runRanks(int nranks, const std::map<std::string, std::string>& env, const Body& body,
                   int nids, double timeoutSec) {
  fflush(stdout);
  fflush(stderr);
  std::vector<int> pipes(2 * nranks);
  for (int r = 1; r < nranks; ++r)
    if (pipe(&pipes[2 * r]) != 0) abort();
  std::vector<pid_t> pids(nranks);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      for (auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      RankCtx ctx{r, nranks, std::vector<ternUniqueId>(nids)};
      if (r == 0) {
        for (auto& id : ctx.ids)
          if (ternGetUniqueId(&id) != ternSuccess) _exit(93);
        for (int q = 1; q < nranks; ++q) writeAll(pipes[2 * q + 1], ctx.ids.data(), nids * sizeof(ternUniqueId));
      } else {
        readAll(pipes[2 * r], ctx.ids.data(), nids * sizeof(ternUniqueId));
      }
      int code = 1;
      try {
        code = body(ctx);
      } catch (...) {
        code = 1;
      }
      fflush(stdout);
      fflush(stderr);
      _exit(code);
    }
    pids[r] = pid;
  }
  for (int fd : pipes)
    if (fd > 0) close(fd);
  RunResult res;
  res.exitCodes.assign(nranks, -1);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<long long>(timeoutSec * 1000));
  int left = nranks;
  while (left > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < nranks; ++r)
        if (pids[r] == pid) {
          res.exitCodes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          --left;
        }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      res.timedOut = true;
      for (int r = 0; r < nranks; ++r)
        if (res.exitCodes[r] < 0) kill(pids[r], SIGKILL);
      deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return res;
}

std::vector<std::string> threadDirs(const char* name) {
  std::vector<std::string> out;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    char comm[64] = {};
    FILE* f = name ? fopen((dir + "/comm").c_str(), "r") : nullptr;
    const bool named = !name || (f && fgets(comm, sizeof comm, f) && strncmp(comm, name, strlen(name)) == 0);
    if (f) fclose(f);
    if (named) out.push_back(dir);
  }
  if (d) closedir(d);
  return out;
}

std::vector<std::string> testTransports() {
#ifdef TERN_TEST_UCX
  return {"shm", "tcp", "ucx-tcp", "ucx-sm"};
#else
  return {"shm", "tcp"};
#endif
}

std::map<std::string, std::string> transportEnv(const std::string& name,
                                                std::map<std::string, std::string> extra) {
  if (name.rfind("ucx-", 0) == 0) {
    extra["TERN_TRANSPORT"] = "ucx";
    extra["UCX_TLS"] = name.substr(4) + ",self";
  } else {
    extra["TERN_TRANSPORT"] = name;
  }
  return extra;
}

void expectAllRanksOk(const RunResult& r) {
  EXPECT_FALSE(r.timedOut);
  for (size_t i = 0; i < r.exitCodes.size(); ++i) EXPECT_EQ(r.exitCodes[i], 0) << "rank " << i;
}

}  // namespace terntest
