// Every class of bad argument and misuse returns the right ternResult_t and a
// sentence from ternGetLastError; nothing crashes or hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "harness.h"
#include "tern/tern.h"

namespace {

class Errors : public ::testing::Test {
 protected:
  void SetUp() override {
    ternUniqueId id;
    ASSERT_EQ(ternGetUniqueId(&id), ternSuccess);
    ASSERT_EQ(ternCommInitRank(&comm, 1, id, 0), ternSuccess) << ternGetLastError(nullptr);
  }
  void TearDown() override {
    if (comm) EXPECT_EQ(ternCommDestroy(comm), ternSuccess);
  }
  // The call failed with `want` and explained itself mentioning `word`.
  void expectError(ternResult_t got, ternResult_t want, const char* word, ternComm_t c = nullptr) {
    EXPECT_EQ(got, want) << ternGetErrorString(got);
    std::string msg = ternGetLastError(c);
    EXPECT_FALSE(msg.empty());
    EXPECT_NE(msg.find(word), std::string::npos) << "message: " << msg;
  }
  ternComm_t comm = nullptr;
  float buf[16] = {};
};

TEST_F(Errors, NullAndDeadCommunicators) {
  expectError(ternAllReduce(buf, buf, 4, ternFloat32, ternSum, nullptr, nullptr),
              ternInvalidArgument, "NULL");
  ternComm_t dead = comm;
  ASSERT_EQ(ternCommDestroy(comm), ternSuccess);
  comm = nullptr;
  expectError(ternAllReduce(buf, buf, 4, ternFloat32, ternSum, dead, nullptr), ternInvalidUsage,
              "destroyed");
  expectError(ternCommDestroy(dead), ternInvalidUsage, "destroyed");
  expectError(ternCommAbort(dead), ternInvalidUsage, "destroyed");
  int n;
  EXPECT_EQ(ternCommCount(dead, &n), ternInvalidUsage);
  EXPECT_EQ(ternCommCount(nullptr, &n), ternInvalidArgument);
}

TEST_F(Errors, BadDatatypesAndOps) {
  expectError(ternAllReduce(buf, buf, 4, static_cast<ternDataType_t>(99), ternSum, comm, nullptr),
              ternInvalidArgument, "datatype", comm);
  expectError(ternAllReduce(buf, buf, 4, static_cast<ternDataType_t>(-1), ternSum, comm, nullptr),
              ternInvalidArgument, "datatype", comm);
  expectError(ternAllReduce(buf, buf, 4, ternFloat32, static_cast<ternRedOp_t>(7), comm, nullptr),
              ternInvalidArgument, "op", comm);
  expectError(ternReduceScatter(buf, buf, 4, ternFloat32, ternNumOps, comm, nullptr),
              ternInvalidArgument, "op", comm);
  expectError(ternReduce(buf, buf, 4, ternNumTypes, ternSum, 0, comm, nullptr),
              ternInvalidArgument, "datatype", comm);
}

TEST_F(Errors, NullBuffersAndZeroCounts) {
  expectError(ternAllReduce(nullptr, buf, 4, ternFloat32, ternSum, comm, nullptr),
              ternInvalidArgument, "NULL", comm);
  expectError(ternAllGather(buf, nullptr, 4, ternFloat32, comm, nullptr), ternInvalidArgument,
              "NULL", comm);
  expectError(ternBroadcast(nullptr, buf, 4, ternFloat32, 0, comm, nullptr), ternInvalidArgument,
              "root", comm);
  expectError(ternSend(nullptr, 4, ternFloat32, 0, comm, nullptr), ternInvalidArgument, "NULL",
              comm);
  // count == 0 is a successful no-op, even with NULL buffers.
  EXPECT_EQ(ternAllReduce(nullptr, nullptr, 0, ternFloat32, ternSum, comm, nullptr), ternSuccess);
  EXPECT_EQ(ternAllGather(nullptr, nullptr, 0, ternInt8, comm, nullptr), ternSuccess);
  EXPECT_EQ(ternBroadcast(nullptr, nullptr, 0, ternInt8, 0, comm, nullptr), ternSuccess);
  expectError(ternAllReduce(buf, buf, SIZE_MAX / 2, ternFloat64, ternSum, comm, nullptr),
              ternInvalidArgument, "too large", comm);
}

TEST_F(Errors, RootsPeersAndStreams) {
  expectError(ternBroadcast(buf, buf, 4, ternFloat32, 1, comm, nullptr), ternInvalidArgument,
              "root", comm);
  expectError(ternReduce(buf, buf, 4, ternFloat32, ternSum, -1, comm, nullptr),
              ternInvalidArgument, "root", comm);
  expectError(ternSend(buf, 4, ternFloat32, 5, comm, nullptr), ternInvalidArgument, "peer", comm);
  expectError(ternRecv(buf, 4, ternFloat32, -2, comm, nullptr), ternInvalidArgument, "peer", comm);
  int fakeStream;
  expectError(ternAllReduce(buf, buf, 4, ternFloat32, ternSum, comm, &fakeStream),
              ternInvalidArgument, "stream", comm);
}

TEST_F(Errors, GroupMisuse) {
  expectError(ternGroupEnd(), ternInvalidUsage, "ternGroupStart");
  expectError(ternSend(buf, 4, ternFloat32, 0, comm, nullptr), ternInvalidUsage, "group", comm);
  ASSERT_EQ(ternGroupStart(), ternSuccess);
  expectError(ternBarrier(comm), ternInvalidUsage, "group", comm);
  EXPECT_EQ(ternSend(buf, 4, ternFloat32, 0, comm, nullptr), ternSuccess);  // self, in a group
  float got[4] = {};
  EXPECT_EQ(ternRecv(got, 4, ternFloat32, 0, comm, nullptr), ternSuccess);
  buf[3] = 7;
  // The refused barrier fails the group: its send and receive never ran.
  expectError(ternGroupEnd(), ternInvalidUsage, "nothing in the group was issued", nullptr);
  EXPECT_EQ(got[3], 0);
  ASSERT_EQ(ternGroupStart(), ternSuccess);
  EXPECT_EQ(ternSend(buf, 4, ternFloat32, 0, comm, nullptr), ternSuccess);
  EXPECT_EQ(ternRecv(got, 4, ternFloat32, 0, comm, nullptr), ternSuccess);
  EXPECT_EQ(ternGroupEnd(), ternSuccess);
  EXPECT_EQ(got[3], 7);
}

// A call refused inside a group fails the whole group at its end, as NCCL's
// ncclGroupEnd returns a failed call's error: nothing of the group runs
// (peers that ran their whole group would get a result this rank left out),
// ternGroupEndAsync gives no request, nested ends wait for the outermost,
// and the next group starts clean.
TEST_F(Errors, ARefusedCallFailsItsGroupAndNothingRuns) {
  const float in[4] = {1, 2, 3, 4};
  float out[4] = {};
  ASSERT_EQ(ternGroupStart(), ternSuccess);
  EXPECT_EQ(ternAllReduce(in, out, 4, ternFloat32, ternSum, comm, nullptr), ternSuccess);
  expectError(ternAllReduce(in, out, 4, static_cast<ternDataType_t>(99), ternSum, comm, nullptr),
              ternInvalidArgument, "datatype", comm);
  EXPECT_EQ(ternAllGather(in, out, 4, ternFloat32, comm, nullptr), ternSuccess);
  expectError(ternGroupEnd(), ternInvalidArgument, "datatype", nullptr);
  EXPECT_NE(std::string(ternGetLastError(nullptr)).find("nothing in the group was issued"), std::string::npos);
  EXPECT_EQ(out[0], 0) << "an operation of the failed group ran";

  ASSERT_EQ(ternGroupStart(), ternSuccess);
  ASSERT_EQ(ternGroupStart(), ternSuccess);
  expectError(ternBroadcast(in, out, 4, ternFloat32, 3, comm, nullptr), ternInvalidArgument, "root 3", comm);
  EXPECT_EQ(ternGroupEnd(), ternSuccess);  // the inner end: the outer one answers
  EXPECT_EQ(ternReduce(in, out, 4, ternFloat32, ternSum, 0, comm, nullptr), ternSuccess);
  ternRequest_t req = reinterpret_cast<ternRequest_t>(&out);  // anything but NULL
  expectError(ternGroupEndAsync(&req), ternInvalidArgument, "root 3", nullptr);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(out[0], 0);

  ASSERT_EQ(ternGroupStart(), ternSuccess);
  EXPECT_EQ(ternAllReduce(in, out, 4, ternFloat32, ternSum, comm, nullptr), ternSuccess);
  ASSERT_EQ(ternGroupEndAsync(&req), ternSuccess) << ternGetLastError(nullptr);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(ternRequestWait(req), ternSuccess);
  EXPECT_EQ(out[3], 4);
}

// ternGetLastError describes the latest failure: a comm-less misuse after a
// communicator's failure is what the thread hears, and a later communicator
// failure wins again.
TEST_F(Errors, LastErrorIsTheNewestFailure) {
  expectError(ternAllReduce(buf, buf, 4, static_cast<ternDataType_t>(99), ternSum, comm, nullptr),
              ternInvalidArgument, "datatype", comm);
  expectError(ternGroupEnd(), ternInvalidUsage, "without a matching ternGroupStart", comm);
  expectError(ternGroupEnd(), ternInvalidUsage, "without a matching ternGroupStart", nullptr);
  expectError(ternBroadcast(buf, buf, 4, ternFloat32, 3, comm, nullptr), ternInvalidArgument,
              "root 3", comm);
  ASSERT_EQ(ternGroupStart(), ternSuccess);
  ASSERT_EQ(ternGroupStart(), ternSuccess);
  ternRequest_t req;
  expectError(ternGroupEndAsync(&req), ternInvalidUsage, "outermost", comm);
  EXPECT_EQ(ternGroupEnd(), ternSuccess);
  EXPECT_EQ(ternGroupEnd(), ternSuccess);
  expectError(ternSetPriority(99), ternInvalidArgument, "ternSetPriority", comm);
  expectError(ternRequestWait(nullptr), ternInvalidUsage, "ternRequestWait", comm);
  expectError(ternAllReduce(buf, buf, 4, ternFloat32, static_cast<ternRedOp_t>(9), comm, nullptr),
              ternInvalidArgument, "op 9", comm);
}

// Comm-less calls record their sentence per thread: two threads failing
// differently each read their own.
TEST(ErrorsInit, CommlessErrorsArePerThread) {
  std::atomic<int> failed{0};
  std::string seen[2];
  auto worker = [&](int i) {
    ternResult_t r = i == 0 ? ternGroupEnd() : ternSetPriority(42);
    EXPECT_EQ(r, i == 0 ? ternInvalidUsage : ternInvalidArgument);
    failed.fetch_add(1);
    while (failed.load() < 2) std::this_thread::yield();  // both have failed before either reads
    seen[i] = ternGetLastError(nullptr);
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  EXPECT_NE(seen[0].find("ternGroupEnd without"), std::string::npos) << seen[0];
  EXPECT_NE(seen[1].find("ternSetPriority: level 42"), std::string::npos) << seen[1];
}

// After a peer fails the communicator: every later call names the cause
// once ("failed earlier (cause)", not nested call after call), other threads
// hear the cause, and a later comm-less misuse is still what
// ternGetLastError reports.
TEST(ErrorsAsync, FailedEarlierNamesTheCauseOnce) {
  terntest::expectAllRanksOk(terntest::runRanks(2, {{"TERN_TIMEOUT", "10"}}, [](terntest::RankCtx& c) {
    ternComm_t comm = c.comm(0);
    if (c.rank == 1) return ternCommAbort(comm) == ternSuccess ? 0 : 1;  // gone: sockets shut
    float x[4] = {};
    if (ternAllReduce(x, x, 4, ternFloat32, ternSum, comm, nullptr) == ternSuccess)
      return terntest::failf(c, "allreduce with an aborted peer succeeded");
    std::string cause = ternGetLastError(comm);
    std::string later[2];
    for (std::string& l : later) {
      if (ternAllReduce(x, x, 4, ternFloat32, ternSum, comm, nullptr) == ternSuccess)
        return terntest::failf(c, "a call on the failed communicator succeeded");
      l = ternGetLastError(comm);
    }
    if (later[0] != later[1] || later[0].find("failed earlier (" + cause + ")") == std::string::npos)
      return terntest::failf(c, "cause '%s', then '%s', then '%s'", cause.c_str(),
                             later[0].c_str(), later[1].c_str());
    // Errors travel one way (base/error.h): a thread that recorded no failure
    // hears why the communicator failed; one that recorded an unrelated one
    // hears the failure once ternCommGetAsyncError has reported it to it.
    std::string watchdog, polled, stale;
    std::thread([&] { watchdog = ternGetLastError(comm); }).join();
    std::thread([&] {
      ternSetPriority(42);
      stale = ternGetLastError(comm);
      ternResult_t async = ternSuccess;
      if (ternCommGetAsyncError(comm, &async) == ternSuccess && async != ternSuccess)
        polled = ternGetLastError(comm);
    }).join();
    if (watchdog.empty() || later[0].find("failed earlier (" + watchdog + ")") == std::string::npos ||
        polled != watchdog || stale.find("ternSetPriority") == std::string::npos)
      return terntest::failf(c, "watchdog '%s', stale '%s', polled '%s', later '%s'", watchdog.c_str(),
                             stale.c_str(), polled.c_str(), later[0].c_str());
    // The same refusal inside an async group: an error and no request (a
    // request for the emptied group once "ended without error").
    ternRequest_t req = nullptr;
    ternGroupStart();
    ternAllReduce(x, x, 4, ternFloat32, ternSum, comm, nullptr);
    ternResult_t g = ternGroupEndAsync(&req);
    if (g == ternSuccess || req != nullptr)
      return terntest::failf(c, "an async group on the failed communicator gave %s and a request %p",
                             ternGetErrorString(g), static_cast<void*>(req));
    if (ternGroupEnd() != ternInvalidUsage ||
        std::string(ternGetLastError(comm)).find("ternGroupStart") == std::string::npos)
      return terntest::failf(c, "after a ternGroupEnd misuse: '%s'", ternGetLastError(comm));
    return ternCommAbort(comm) == ternSuccess ? 0 : 1;
  }, 1, 60));
}

TEST(ErrorsInit, BadInitArguments) {
  ternUniqueId id;
  ASSERT_EQ(ternGetUniqueId(&id), ternSuccess);
  ternComm_t c;
  EXPECT_EQ(ternCommInitRank(nullptr, 1, id, 0), ternInvalidArgument);
  EXPECT_EQ(ternCommInitRank(&c, 0, id, 0), ternInvalidArgument);
  EXPECT_NE(std::string(ternGetLastError(nullptr)).find("nranks"), std::string::npos);
  EXPECT_EQ(ternCommInitRank(&c, 2, id, 2), ternInvalidArgument);
  EXPECT_EQ(ternCommInitRank(&c, 2, id, -1), ternInvalidArgument);
  ternUniqueId junk;
  memset(&junk, 0x41, sizeof junk);
  EXPECT_EQ(ternCommInitRank(&c, 1, junk, 0), ternInvalidArgument);
  EXPECT_NE(std::string(ternGetLastError(nullptr)).find("unique id"), std::string::npos);
  EXPECT_EQ(ternGetUniqueId(nullptr), ternInvalidArgument);
  EXPECT_EQ(ternGetVersion(nullptr), ternInvalidArgument);
  int v = 0;
  EXPECT_EQ(ternGetVersion(&v), ternSuccess);
  EXPECT_EQ(v, TERN_VERSION_CODE);
}

TEST(ErrorsInit, BadTransportNameAndMissingLauncher) {
  ternUniqueId id;
  ASSERT_EQ(ternGetUniqueId(&id), ternSuccess);
  setenv("TERN_TRANSPORT", "carrier-pigeon", 1);
  ternComm_t c;
  EXPECT_EQ(ternCommInitRank(&c, 1, id, 0), ternInvalidArgument);
  EXPECT_NE(std::string(ternGetLastError(nullptr)).find("TERN_TRANSPORT"), std::string::npos);
  unsetenv("TERN_TRANSPORT");
  for (const char* v : {"TERN_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"})
    unsetenv(v);
  EXPECT_EQ(ternCommInitFromEnv(&c), ternInvalidUsage);
  EXPECT_NE(std::string(ternGetLastError(nullptr)).find("launcher"), std::string::npos);
  setenv("TERN_RANK", "3", 1);
  setenv("TERN_NRANKS", "2", 1);
  EXPECT_EQ(ternCommInitFromEnv(&c), ternInvalidArgument);
  unsetenv("TERN_RANK");
  unsetenv("TERN_NRANKS");
}

TEST(ErrorsInit, ErrorStringsCoverEveryCode) {
  for (int r = ternSuccess; r <= ternTimeout; ++r)
    EXPECT_STRNE(ternGetErrorString(static_cast<ternResult_t>(r)), "unknown result code");
  EXPECT_STREQ(ternGetErrorString(static_cast<ternResult_t>(42)), "unknown result code");
}

}  // namespace
