// Launch paths: ternCommInitFromEnv under each launcher's variables (ternrun,
// mpirun, torchrun), a mismatched TERN_SECRET, and the real launchers running
// a perf binary: tools/ternrun and OpenMPI's mpirun.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "base/socket.h"
#include "harness.h"

using namespace terntest;

namespace {

// Sets per-rank variables, inits from env, checks one allreduce.
int envBody(RankCtx& ctx, const char* rankVar, const char* sizeVar) {
  setenv(rankVar, std::to_string(ctx.rank).c_str(), 1);
  setenv(sizeVar, std::to_string(ctx.nranks).c_str(), 1);
  ternComm_t comm;
  if (ternCommInitFromEnv(&comm) != ternSuccess)
    return failf(ctx, "init from %s failed: %s", rankVar, ternGetLastError(nullptr));
  int rank = -1, n = -1;
  ternCommUserRank(comm, &rank);
  ternCommCount(comm, &n);
  long x = rank;
  if (ternAllReduce(&x, &x, 1, ternInt64, ternSum, comm, nullptr) != ternSuccess ||
      x != static_cast<long>(n) * (n - 1) / 2 || rank != ctx.rank || n != ctx.nranks)
    return failf(ctx, "wrong result %ld (rank %d of %d)", x, rank, n);
  ternCommDestroy(comm);
  return 0;
}

TEST(EnvInit, TernrunVariables) {
  std::string root = "127.0.0.1:" + std::to_string(tern::freeLoopbackPort());
  expectAllRanksOk(runRanks(3, {{"TERN_ROOT", root}, {"TERN_SECRET", "00112233445566778899aabbccddeeff"}},
                       [](RankCtx& c) { return envBody(c, "TERN_RANK", "TERN_NRANKS"); }));
}

TEST(EnvInit, MpirunVariablesAllLocal) {
  expectAllRanksOk(runRanks(3, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                           {"TERN_ROOT_PORT", std::to_string(tern::freeLoopbackPort())}},
                       [](RankCtx& c) {
                         return envBody(c, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
                       }));
}

TEST(EnvInit, TorchrunVariables) {
  int port = tern::freeLoopbackPort() - 1;  // tern uses MASTER_PORT + 1; torch's store has MASTER_PORT
  expectAllRanksOk(runRanks(2, {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}},
                       [](RankCtx& c) { return envBody(c, "RANK", "WORLD_SIZE"); }));
}

TEST(EnvInit, MismatchedSecretFailsInsteadOfHanging) {
  std::string root = "127.0.0.1:" + std::to_string(tern::freeLoopbackPort());
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = runRanks(2, {{"TERN_ROOT", root}, {"TERN_TIMEOUT", "3"}}, [](RankCtx& c) {
    setenv("TERN_SECRET", c.rank == 0 ? "000102030405060708090a0b0c0d0e0f"
                                      : "ffffffffffffffffffffffffffffffff", 1);
    setenv("TERN_RANK", std::to_string(c.rank).c_str(), 1);
    setenv("TERN_NRANKS", "2", 1);
    ternComm_t comm;
    ternResult_t res = ternCommInitFromEnv(&comm);
    if (res == ternSuccess) return failf(c, "joined a job with a different secret");
    return 0;
  });
  expectAllRanksOk(r);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15);
}

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// OpenMPI's launcher for 3 ranks as root, unbound (as perf/compare runs it).
const char* const kOpenMpi3 =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --oversubscribe "
    "--bind-to none -np 3 ";

TEST(Launcher, TernrunRunsAPerfBinary) {
  int st;
  std::string out = run(std::string(TERNRUN) + " -n 3 " + PERF_DIR +
                            "/all_reduce_perf -b 8 -e 256K -f 4 -w 1 -n 2 -d all -o all", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("[0] #  Rank  2 Group"), std::string::npos) << "not 3 ranks: " << out;
}

// -W 1 (perf/harness/common.cc timedLoop): the send buffer written again
// before each timed call and the last call's result checked; an in-place
// allreduce whose input was not restored reads its own sums and fails it.
TEST(Launcher, PerfBinariesCheckTheirLastCallWithBuffersWrittenBeforeEachCall) {
  const std::string args = " -b 96 -e 96K -f 32 -w 1 -n 3 -W 1";
  int st;
  for (const char* coll : {"all_reduce", "sendrecv", "broadcast"}) {
    std::string out = run(std::string(TERNRUN) + " -n 3 " + PERF_DIR + "/" + coll + "_perf" + args, &st);
    EXPECT_EQ(st, 0) << coll << ": " << out;
    EXPECT_NE(out.find("# -W 1: each call's send buffer written just before it"), std::string::npos) << out;
    EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << coll << ": " << out;
  }
  ASSERT_EQ(system("command -v mpirun.openmpi >/dev/null"), 0)
      << "mpirun.openmpi not installed (scripts/install-deps.sh)";
  std::string out = run(kOpenMpi3 + std::string(PERF_DIR) + "/mpi_all_reduce_perf" + args, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
}

TEST(Launcher, TernrunStopsTheOthersAndReturnsTheFailingCode) {
  int st;
  auto t0 = std::chrono::steady_clock::now();
  std::string out = run(std::string(TERNRUN) +
                            " -n 3 sh -c 'if [ $TERN_RANK = 1 ]; then exit 7; fi; sleep 60'", &st);
  EXPECT_EQ(st, 7) << out;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20);
  EXPECT_NE(out.find("rank 1 exited with code 7"), std::string::npos) << out;
}

TEST(Launcher, MpirunRunsAPerfBinary) {
  if (system("command -v mpirun >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun not installed (apt-get install openmpi-bin)";
  int st;
  std::string out = run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                        "--oversubscribe --bind-to none -np 3 " + std::string(PERF_DIR) +
                            "/all_reduce_perf -b 8 -e 1M -f 4 -w 1 -n 2", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
}

// The peers of perf/compare's side-by-side tables check their results with
// the same harness as tern's: a wrong block layout or in-place handling there
// would make the comparison meaningless.  Every collective, OpenMPI, MPICH
// and Gloo, 3 ranks, out of place and in place.
class PeerTables : public ::testing::TestWithParam<std::string> {};

TEST_P(PeerTables, AreCorrect) {
  // scripts/install-deps.sh installs both peers: missing is a failure.
  const std::string coll = GetParam();
  const std::string args = " -b 96 -e 96K -f 4 -w 1 -n 2";
  int st;
  ASSERT_EQ(system("command -v mpirun.openmpi && command -v mpirun.mpich"), 0)
      << "mpirun.openmpi or mpirun.mpich not installed (scripts/install-deps.sh)";
  const char* mpis[][2] = {{kOpenMpi3, "/mpi_"}, {"mpirun.mpich -np 3 ", "/mpich_"}};
  for (auto& m : mpis) {
    std::string out = run(m[0] + std::string(PERF_DIR) + m[1] + coll + "_perf" + args, &st);
    EXPECT_EQ(st, 0) << m[1] << ": " << out;
    EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
  }
  if (coll == "reduce_scatter") return;  // Gloo has none
  std::string gloo = std::string(PERF_DIR) + "/gloo_" + coll + "_perf";
  ASSERT_EQ(access(gloo.c_str(), X_OK), 0) << gloo << " not built (libgloo-dev missing?)";
  char dir[] = "/tmp/tern-gloo-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string out = run("GLOO_STORE_DIR=" + std::string(dir) + " " + TERNRUN + " -n 3 " + gloo + args,
                        &st);
  system(("rm -rf " + std::string(dir)).c_str());
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("# Out of bounds values : 0 OK"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Launcher, PeerTables,
                         ::testing::Values("all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                           "reduce", "sendrecv", "alltoall", "gather", "scatter"));

}  // namespace
