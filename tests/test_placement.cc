// Placement through the public API: TERN_TOPO_XML / TERN_TOPO_DUMP reach the
// dump file, TERN_PIN_PROGRESS binds the real progress thread, bad settings
// are errors with a sentence.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "harness.h"

using namespace terntest;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Cpus_allowed_list of every thread of this process but the calling one.
std::vector<std::string> otherThreadsCpus() {
  std::vector<std::string> out;
  const std::string self = "/proc/self/task/" + std::to_string(gettid());
  for (const std::string& dir : threadDirs()) {
    if (dir == self) continue;
    std::istringstream st(slurp(dir + "/status"));
    for (std::string line; std::getline(st, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) out.push_back(line.substr(line.find_last_of("\t ") + 1));
  }
  return out;
}

std::string tempDir() {
  char tmpl[] = "/tmp/tern-topo-XXXXXX";
  return mkdtemp(tmpl) ? tmpl : "/tmp";
}

}  // namespace

TEST(TopoDump, EachRankWritesWhatItDetectedAndDecided) {
  std::string dir = tempDir();
  auto r = runRanks(4,
                    {{"TERN_TOPO_XML", std::string(TOPO_DIR) + "/two_socket_8gpu_4nic.xml"},
                     {"TERN_TOPO_DUMP", dir + "/topo.%r.txt"}},
                    [](RankCtx& c) {
                      ternComm_t comm = c.comm();
                      if (!comm) return failf(c, "init: %s", ternGetLastError(nullptr));
                      float x = 1;
                      if (ternAllReduce(&x, &x, 1, ternFloat32, ternSum, comm, nullptr) != ternSuccess ||
                          x != 4)
                        return failf(c, "allreduce after placement: %g", x);
                      return ternCommDestroy(comm) == ternSuccess ? 0 : 1;
                    });
  expectAllRanksOk(r);
  for (int rank = 0; rank < 4; ++rank) {
    std::string d = slurp(dir + "/topo." + std::to_string(rank) + ".txt");
    SCOPED_TRACE(d);
    EXPECT_NE(d.find("rank " + std::to_string(rank) + " of 4 (local " + std::to_string(rank) + " of 4)"),
              std::string::npos);
    EXPECT_NE(d.find("from " + std::string(TOPO_DIR)), std::string::npos);
    EXPECT_NE(d.find("decision gpu " + std::to_string(rank)), std::string::npos);
    EXPECT_NE(d.find("nic " + std::to_string(rank / 2) + " (mlx5_" + std::to_string(rank / 2)),
              std::string::npos);
    unlink((dir + "/topo." + std::to_string(rank) + ".txt").c_str());
  }
  rmdir(dir.c_str());
}

TEST(TopoDump, ThisHostIsDumpedWithoutAPattern) {
  std::string dir = tempDir(), path = dir + "/host.txt";
  setenv("TERN_TOPO_DUMP", path.c_str(), 1);
  ternUniqueId id;
  ternComm_t comm = nullptr;
  ASSERT_EQ(ternGetUniqueId(&id), ternSuccess);
  ASSERT_EQ(ternCommInitRank(&comm, 1, id, 0), ternSuccess) << ternGetLastError(nullptr);
  unsetenv("TERN_TOPO_DUMP");
  ternCommDestroy(comm);
  std::string d = slurp(path);  // one rank: no ".<rank>" suffix
  EXPECT_NE(d.find("from this host"), std::string::npos) << d;
  EXPECT_NE(d.find("decision gpu -1"), std::string::npos) << d;
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST(Pinning, OnBindsEachRanksProgressThreadToItsOwnCore) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  auto r = runRanks(2, {{"TERN_PIN_PROGRESS", "on"}}, [ncpu](RankCtx& c) {
    ternComm_t comm = c.comm();
    if (!comm) return failf(c, "init: %s", ternGetLastError(nullptr));
    // Cores are taken from the highest down, one per local rank (this host
    // has one PU per core; with fewer cores than ranks they are shared).
    std::string want = std::to_string((ncpu - 1 - c.rank % ncpu + ncpu) % ncpu);
    int bound = 0;
    for (auto& s : otherThreadsCpus()) bound += s == want;
    ternCommDestroy(comm);
    return bound == 1 ? 0 : failf(c, "%d threads bound to CPU %s", bound, want.c_str());
  });
  expectAllRanksOk(r);
}

TEST(Pinning, AutoLeavesThreadsAloneWhenEveryCpuIsEquallyNear) {
  auto r = runRanks(1, {{"TERN_PIN_PROGRESS", "auto"}}, [](RankCtx& c) {
    ternComm_t comm = c.comm();
    if (!comm) return failf(c, "init: %s", ternGetLastError(nullptr));
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    std::string all = "0-" + std::to_string(CPU_COUNT(&set) - 1);
    if (CPU_COUNT(&set) == 1) all = "0";
    int narrowed = 0;
    for (auto& s : otherThreadsCpus()) narrowed += s != all;
    ternCommDestroy(comm);
    return narrowed == 0 ? 0 : failf(c, "%d threads narrowed", narrowed);
  });
  expectAllRanksOk(r);
}

TEST(Placement, BadSettingsAreInvalidArguments) {
  for (auto [var, value, word] :
       {std::tuple<const char*, const char*, const char*>{"TERN_PIN_PROGRESS", "sometimes", "TERN_PIN_PROGRESS"},
        {"TERN_TOPO_XML", "/nonexistent.xml", "topology XML"},
        {"TERN_NET", "carrier-pigeon", "TERN_NET"}}) {
    setenv(var, value, 1);
    ternUniqueId id;
    ternComm_t comm = nullptr;
    ASSERT_EQ(ternGetUniqueId(&id), ternSuccess);
    EXPECT_EQ(ternCommInitRank(&comm, 1, id, 0), ternInvalidArgument) << var;
    std::string msg = ternGetLastError(nullptr);
    EXPECT_NE(msg.find(word), std::string::npos) << msg;
    unsetenv(var);
  }
}
