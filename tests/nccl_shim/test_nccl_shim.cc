// tern's libnccl.so.2: its ABI (every function of the toolkit's nccl.h and
// its pnccl alias exported, unversioned, soname libnccl.so.2, nothing else),
// ncclConfig_t as NCCL reads it (older and newer structs, magic, versions),
// and errors with a sentence on one-rank communicators.
#include <gtest/gtest.h>
#include <nccl.h>
#if __has_include(<nccl_device.h>)
#include <cstddef>
#include <cuda_runtime.h>  // types only
#include <nccl_device.h>
#define TERN_HAVE_NCCL_DEVICE_API 1
#endif

#include <chrono>
#include <cstdio>
#include <thread>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// Adds to `names` the first group of every match of `decl` in the file at
// `path` (none when it cannot be read).
void declaredIn(const std::string& path, const std::regex& decl, std::set<std::string>* names) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  for (std::sregex_iterator it(text.begin(), text.end(), decl), end; it != end; ++it)
    names->insert((*it)[1]);
}

// Every function nccl.h declares: "<type> nccl<Name>(" at the start of a line.
std::set<std::string> headerFunctions() {
  std::set<std::string> names;
  declaredIn(TERN_NCCL_HEADER,
             std::regex(R"((?:^|\n)\s*(?:const\s+char\s*\*|ncclResult_t|void)\s+(p?nccl\w+)\s*\()"), &names);
  return names;
}

// The host functions of NCCL's device API (nccl_device/*.h beside nccl.h,
// NCCL >= 2.28): "NCCL_EXTERN_C __host__ <type> nccl<Name>(".  Programs built
// against it (PyTorch 2.11) bind them at load.
std::set<std::string> deviceApiHostFunctions() {
  std::string dir = TERN_NCCL_HEADER;
  dir = dir.substr(0, dir.rfind('/')) + "/nccl_device/";
  std::regex decl(R"(NCCL_EXTERN_C\s+__host__\s+[\w\s\*]*?\b(nccl\w+)\s*\()");
  std::set<std::string> names;
  for (const char* h : {"core.h", "ll_a2a.h", "lsa_barrier.h", "gin_barrier.h"}) declaredIn(dir + h, decl, &names);
  return names;
}

// name -> "T"/"W"/... for every defined dynamic symbol of the shim.
std::map<std::string, std::string> exported() {
  std::map<std::string, std::string> syms;
  std::istringstream lines(run("nm -D --defined-only " TERN_NCCL_SHIM));
  std::string addr, type, name;
  while (lines >> addr >> type >> name) syms[name] = type;
  return syms;
}

ncclComm_t oneRankComm(ncclConfig_t* cfg, ncclResult_t* result) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  *result = ncclCommInitRankConfig(&comm, 1, id, 0, cfg);
  return comm;
}

// A blocking comm runs an allreduce to completion in the call; a nonblocking
// one may answer ncclInProgress.  Returns the allreduce's return code.
ncclResult_t probeBlocking(ncclComm_t comm) {
  float x = 1;
  return ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr);
}

// Polls a nonblocking result to its end (at most 30 s).
ncclResult_t settle(ncclComm_t comm, ncclResult_t r) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (r == ncclInProgress && std::chrono::steady_clock::now() < end) {
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return r;
}

}  // namespace

TEST(NcclShimAbi, EveryHeaderFunctionAndItsPncclAliasIsExported) {
  std::set<std::string> want = headerFunctions();
  ASSERT_GT(want.size(), 70u) << "the header parse found too few functions";
  ASSERT_TRUE(want.count("ncclAllReduce") && want.count("pncclCommShrink"));
  auto syms = exported();
  for (const std::string& f : want) {
    std::string base = f[0] == 'p' ? f.substr(1) : f;
    EXPECT_TRUE(syms.count(base)) << base << " is declared in nccl.h but not exported";
    EXPECT_TRUE(syms.count("p" + base)) << "p" << base << " is not exported";
  }
}

TEST(NcclShimAbi, EveryHostFunctionOfTheDeviceApiIsExported) {
  std::set<std::string> want = deviceApiHostFunctions();
  if (want.empty()) GTEST_SKIP() << "this toolkit's NCCL has no device API headers (before 2.28)";
  EXPECT_TRUE(want.count("ncclDevCommDestroy") && want.count("ncclTeamWorld"));
  auto syms = exported();
  for (const std::string& f : want) EXPECT_TRUE(syms.count(f)) << f << " is declared in nccl_device/ but not exported";
}

TEST(NcclShimAbi, UnversionedNcclSymbolsOnlyAndSoname) {
  auto syms = exported();
  for (const auto& [name, type] : syms) {
    EXPECT_EQ(name.find('@'), std::string::npos) << name << " carries a symbol version";
    EXPECT_TRUE(name.rfind("nccl", 0) == 0 || name.rfind("pnccl", 0) == 0)
        << name << " is exported but is not an NCCL symbol";
  }
  // As NCCL: the pnccl name is the definition, nccl a weak alias a profiler can override.
  EXPECT_EQ(syms["pncclAllReduce"], "T");
  EXPECT_EQ(syms["ncclAllReduce"], "W");
  std::string dyn = run("objdump -p " TERN_NCCL_SHIM);
  EXPECT_NE(dyn.find("SONAME               libnccl.so.2"), std::string::npos) << dyn;
}

TEST(NcclShimConfig, CurrentStructBlockingAndNonblocking) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r;
  ncclComm_t comm = oneRankComm(&cfg, &r);
  ASSERT_NE(comm, nullptr);
  ASSERT_EQ(settle(comm, r), ncclSuccess);
  ncclResult_t a = probeBlocking(comm);
  EXPECT_TRUE(a == ncclInProgress || a == ncclSuccess);
  EXPECT_EQ(settle(comm, a), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// The ncclConfig_t of NCCL 2.14's header: the first eight fields only.
struct ConfigV21400 {
  size_t size;
  unsigned int magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char* netName;
};

TEST(NcclShimConfig, OlderSmallerStructIsReadByItsSizeAndVersion) {
  ConfigV21400 old{sizeof(ConfigV21400), 0xcafebeef, 21400, 0, NCCL_CONFIG_UNDEF_INT,
                   NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, nullptr};
  ncclResult_t r;
  ncclComm_t comm = oneRankComm(reinterpret_cast<ncclConfig_t*>(&old), &r);
  ASSERT_NE(comm, nullptr) << ncclGetLastError(nullptr);
  EXPECT_EQ(settle(comm, r), ncclSuccess);
  EXPECT_EQ(settle(comm, probeBlocking(comm)), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(NcclShimConfig, FieldsNewerThanTheCallersVersionAreIgnored) {
  // A 2.13 header had no `blocking`: whatever sits there is not read, so the
  // comm is blocking (the call completes, ncclSuccess) even with 0 there.
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.version = 21300;
  cfg.blocking = 0;
  cfg.nvlinkCentricSched = 12345;  // a 2.28 field with an invalid value: not read either
  ncclResult_t r;
  ncclComm_t comm = oneRankComm(&cfg, &r);
  ASSERT_NE(comm, nullptr) << ncclGetLastError(nullptr);
  EXPECT_EQ(r, ncclSuccess);
  EXPECT_EQ(probeBlocking(comm), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(NcclShimConfig, NewerLargerStructIsAccepted) {
  struct {
    ncclConfig_t base;
    int futureA, futureB;  // fields a later header might add
  } big{NCCL_CONFIG_INITIALIZER, 7, 8};
  big.base.size = sizeof big;
  big.base.version = 23000;
  big.base.blocking = 1;
  ncclResult_t r;
  ncclComm_t comm = oneRankComm(&big.base, &r);
  ASSERT_NE(comm, nullptr) << ncclGetLastError(nullptr);
  EXPECT_EQ(r, ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(NcclShimConfig, BadMagicSizeOrValueIsRefusedWithASentence) {
  struct Case {
    void (*edit)(ncclConfig_t*);
    const char* word;
  } cases[] = {
      {[](ncclConfig_t* c) { c->magic = 0x1234; }, "magic"},
      {[](ncclConfig_t* c) { c->size = 8; }, "too small"},
      {[](ncclConfig_t* c) { c->blocking = 7; }, "blocking"},
      {[](ncclConfig_t* c) { c->minCTAs = 8, c->maxCTAs = 2; }, "maxCTAs"},
      {[](ncclConfig_t* c) { c->trafficClass = 300; }, "trafficClass"},
  };
  for (const Case& k : cases) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    k.edit(&cfg);
    ncclResult_t r;
    ncclComm_t comm = oneRankComm(&cfg, &r);
    EXPECT_EQ(r, ncclInvalidArgument) << k.word;
    EXPECT_EQ(comm, nullptr);
    EXPECT_NE(std::string(ncclGetLastError(nullptr)).find(k.word), std::string::npos)
        << ncclGetLastError(nullptr);
  }
}

TEST(NcclShimErrors, BadInitArgumentsAndDeadHandles) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("rank 2 of 2"), std::string::npos);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 1, 0, 0, &id, nullptr), ncclInvalidArgument);
  int n;
  EXPECT_EQ(ncclCommCount(nullptr, &n), ncclInvalidArgument);
  ncclResult_t r;
  ncclComm_t one = oneRankComm(nullptr, &r);
  ASSERT_EQ(r, ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(one), ncclSuccess);
  // A destroyed handle is refused, not followed.
  EXPECT_EQ(ncclCommCount(one, &n), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("not a live communicator"), std::string::npos);
  EXPECT_STREQ(ncclGetErrorString(ncclInProgress), "NCCL operation in progress");
}

TEST(NcclShimInit, ScalableShrinkAndSplitOnOneRank) {
  ncclUniqueId ids[1];
  ASSERT_EQ(ncclGetUniqueId(&ids[0]), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankScalable(&comm, 1, 0, 1, ids, nullptr), ncclSuccess);
  ncclComm_t child = nullptr;
  EXPECT_EQ(ncclCommShrink(comm, nullptr, 0, &child, nullptr, 7), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("shrinkFlags 7"), std::string::npos);
  ASSERT_EQ(ncclCommShrink(comm, nullptr, 0, &child, nullptr, NCCL_SHRINK_ABORT), ncclSuccess);
  int n = 0;
  EXPECT_EQ(ncclCommCount(child, &n), ncclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
  // A child config overrides what it inherits: a nonblocking split of a blocking parent.
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommSplit(comm, 3, 0, &child, &cfg);
  ASSERT_NE(child, nullptr) << ncclGetLastError(comm);
  EXPECT_EQ(settle(child, r), ncclSuccess);
  float x = 2;
  EXPECT_EQ(settle(child, ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, child, nullptr)), ncclSuccess);
  EXPECT_EQ(x, 2);
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
  ncclComm_t none = comm;
  EXPECT_EQ(ncclCommSplit(comm, -5, 0, &none, nullptr), ncclInvalidArgument);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(NcclShimErrors, DataCallsOnOneRank) {
  ncclResult_t r;
  ncclComm_t comm = oneRankComm(nullptr, &r);
  ASSERT_EQ(r, ncclSuccess);
  double x[3] = {1, 2, 3}, y[3];
  EXPECT_EQ(ncclAllReduce(x, y, 3, ncclFloat64, ncclAvg, comm, nullptr), ncclSuccess);
  EXPECT_EQ(y[2], 3);
  EXPECT_EQ(ncclAllReduce(x, y, 3, ncclFloat8e5m2, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("float8e5m2"), std::string::npos);
  EXPECT_EQ(ncclReduce(x, y, 3, ncclFloat64, ncclSum, 1, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("root 1 is not in [0, 1)"), std::string::npos);
  EXPECT_EQ(ncclCommRevoke(comm, 5), ncclInvalidArgument);
  // Registrations: another comm's handle is refused; ones left at destroy
  // are freed with the comm (the AddressSanitizer run would see a leak).
  ncclResult_t r2;
  ncclComm_t other = oneRankComm(nullptr, &r2);
  ASSERT_EQ(r2, ncclSuccess);
  void* h = nullptr;
  ncclWindow_t w = nullptr;
  ASSERT_EQ(ncclCommRegister(other, x, sizeof x, &h), ncclSuccess);
  ASSERT_EQ(ncclCommWindowRegister(other, x, sizeof x, &w, NCCL_WIN_DEFAULT), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comm, h), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("of this communicator"), std::string::npos);
  EXPECT_EQ(ncclCommWindowRegister(other, x, sizeof x, &w, 0x40), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(other), ncclSuccess);
  ncclComm_t child;
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclCommSplit(comm, 0, 0, &child, nullptr), ncclInvalidUsage);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

#ifdef TERN_HAVE_NCCL_DEVICE_API
// The device API exists for the programs that bind it; using it gets a
// sentence, and the teams describe tern's world (LSA teams of one rank).
TEST(NcclShimErrors, DeviceApiRefusedWithASentenceTeamsTruthful) {
  ncclResult_t r;
  ncclComm_t comm = oneRankComm(nullptr, &r);
  ASSERT_EQ(r, ncclSuccess);
  ncclDevCommRequirements_t reqs = {};
  ncclDevComm_t dev;
  EXPECT_EQ(ncclDevCommCreate(comm, &reqs, &dev), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("no device API"), std::string::npos);
  EXPECT_EQ(ncclDevCommDestroy(comm, &dev), ncclInvalidArgument);
  EXPECT_EQ(ncclDevCommCreate(nullptr, &reqs, &dev), ncclInvalidArgument);
  ncclTeam_t world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm);
  EXPECT_EQ(world.nRanks, 1);
  EXPECT_EQ(world.rank, 0);
  EXPECT_EQ(lsa.nRanks, 1);
  EXPECT_EQ(ncclTeamRankToWorld(comm, world, 0), 0);
  EXPECT_EQ(ncclTeamRankToLsa(comm, world, 0), 0);
  EXPECT_EQ(ncclLLA2ACalcSlots(32, 16), 64);  // NCCL's: 8 bytes of an element per slot
  EXPECT_EQ(ncclLLA2ACalcSlots(10, 4), 10);
  EXPECT_EQ(ncclDevCommCreate(comm, nullptr, &dev), ncclInvalidUsage);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclTeamWorld(comm).rank, -1);  // a dead handle is refused, not followed
}
#endif
