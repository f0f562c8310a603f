// Device buffers on a stream through the whole engine, on the simulated
// device (src/memory/simulated.h): CI has no GPU, so this stand-in runs the
// asynchronous memory path that CUDA uses (operation begun on the caller's
// thread, started once the stream's earlier work is done, bursts fenced,
// the caller's stream held until the operation ends).  Its device addresses
// fault when the host touches them, so a host dereference crashes a rank and
// fails the test.  Real processes, real shm / tcp connections.
//
// Each rank checks, for every collective and send/recv (and PreMulSum ops
// in every collective that takes an op): the call returns
// before the stream's earlier work (held back by a gate) has run and the
// operation is still in flight then; once the gate opens, the result read
// back by work enqueued after the call equals the host path's result for
// the same inputs (the ternary allreduce's too, bit for bit: its codec runs
// as the memory type's kernels on the stream, and the same Philox counters
// give the same codes; with error feedback too, over several calls whose
// residuals stay on the device).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device_cases.h"
#include "harness.h"
#include "memory/cuda_runtime_probe.h"
#include "base/env.h"
#include "memory/simulated.h"
#include "memory/staged.h"
#include "sim_device.h"

using namespace terntest;
namespace sim = tern::sim;

namespace {

// Small calls take the staged path (memory/staged.h) unless
// TERN_STAGED_MAX_BYTES=0 sends them down the engine's device path: the
// suite runs both, and checks which one its calls took.
int deviceBody(RankCtx& ctx) {
  sim::enable();
  Device d = simDevice(sim::newStream());
  int fails = deviceSuite(ctx, d);
  const bool staged = tern::envInt("TERN_STAGED_MAX_BYTES", 1) != 0;
  if (staged != (tern::stagedCalls() > 0))
    fails += failf(ctx, "%zu calls staged with TERN_STAGED_MAX_BYTES %s", tern::stagedCalls(),
                   staged ? "on" : "0");
  return fails;
}

using Param = std::tuple<std::string, int, std::string>;
class DeviceSim : public ::testing::TestWithParam<Param> {};

TEST_P(DeviceSim, EveryCollectiveOnAStreamMatchesTheHostPathInStreamOrder) {
  auto [transport, nranks, path] = GetParam();
  auto env = transportEnv(transport);
  if (path == "engine") env["TERN_STAGED_MAX_BYTES"] = "0";
  expectAllRanksOk(runRanks(nranks, env, deviceBody, 2, 120));
}

// The caller blocks on its stream right after each call (a synchronize,
// `tensor.cpu()`), with the simulated driver's lock modelled: a caller
// blocked there holds it and every enqueue needs it, as on the H200 where
// two ranks deadlocked this way (perf/RESULTS.md, 2026-12-04: GPU checks on
// an H200).  The staged path's executor makes no device call, so every call
// completes; the engine's device path enqueues from the executor and hangs
// here (run by hand with TERN_STAGED_MAX_BYTES=0: the ranks time out).
int blockedCallerBody(RankCtx& ctx) {
  sim::enable();
  sim::modelDriverLock(true);
  ternComm_t comm = ctx.comm();
  sim::Stream* s = sim::newStream();
  const size_t count = 4096, bytes = count * 4;
  void* buf = sim::alloc(bytes);
  std::vector<float> in(count), out(count);
  int fails = 0;
  for (int step = 0; step < 20 && !fails; ++step) {
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((ctx.rank + 1) * (step + i % 7));
    sim::memcpyAsync(s, buf, in.data(), bytes);
    if (ternAllReduce(buf, buf, count, ternFloat32, ternSum, comm, reinterpret_cast<ternStream_t>(s)) !=
        ternSuccess)
      fails += failf(ctx, "allreduce: %s", ternGetLastError(comm));
    sim::synchronize(s);  // the caller blocked in the "driver", as cudaStreamSynchronize
    sim::memcpyAsync(s, out.data(), buf, bytes);
    sim::synchronize(s);
    const float ranks = static_cast<float>(ctx.nranks * (ctx.nranks + 1) / 2);
    for (size_t i = 0; i < count && !fails; ++i)
      if (out[i] != ranks * static_cast<float>(step + i % 7))
        fails += failf(ctx, "step %d element %zu: %g", step, i, out[i]);
  }
  if (tern::stagedCalls() < 20) fails += failf(ctx, "only %zu calls were staged", tern::stagedCalls());
  sim::modelDriverLock(false);
  return fails;
}

TEST(DeviceSimStaged, ACallerBlockedOnItsStreamAfterEachCallDoesNotStopTheCollective) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), blockedCallerBody, 1, 60));
  expectAllRanksOk(runRanks(3, transportEnv("tcp"), blockedCallerBody, 1, 60));
}

// CUDA graph capture (the simulated device's model of it): 10 allreduces
// and their input and output copies captured into one graph, replayed 10
// times with new inputs each time: 100 allreduces, each checked.  At
// capture nothing runs; each replay's host node hands the engine the call.
// A call the staged path cannot take is refused while capturing.
int captureBody(RankCtx& ctx) {
  sim::enable();
  ternComm_t comm = ctx.comm();
  sim::Stream* s = sim::newStream();
  ternStream_t st = reinterpret_cast<ternStream_t>(s);
  constexpr int kCalls = 10, kReplays = 10;
  const size_t count = 2048, bytes = count * 4;
  std::vector<std::vector<float>> in(kCalls, std::vector<float>(count)), out = in;
  std::vector<void*> buf(kCalls);
  for (void*& b : buf) b = sim::alloc(bytes);
  int fails = 0;
  sim::beginCapture(s);
  for (int k = 0; k < kCalls; ++k) {
    sim::memcpyAsync(s, buf[k], in[k].data(), bytes);
    if (ternAllReduce(buf[k], buf[k], count, ternFloat32, ternSum, comm, st) != ternSuccess)
      fails += failf(ctx, "captured allreduce %d: %s", k, ternGetLastError(comm));
    sim::memcpyAsync(s, out[k].data(), buf[k], bytes);
  }
  ternRedOp_t premul;
  float two = 2.0f;
  ternRedOpCreatePreMulSum(&premul, &two, ternFloat32, ternScalarHostImmediate, comm);
  if (ternAllReduce(buf[0], buf[0], count, ternFloat32, premul, comm, st) != ternInvalidUsage)
    fails += failf(ctx, "a PreMulSum allreduce was not refused while capturing");
  sim::Graph* g = sim::endCapture(s);
  const size_t staged = tern::stagedCalls();
  const float sumRanks = static_cast<float>(ctx.nranks * (ctx.nranks + 1) / 2);
  for (int r = 0; r < kReplays && !fails; ++r) {
    for (int k = 0; k < kCalls; ++k)
      for (size_t i = 0; i < count; ++i) in[k][i] = static_cast<float>((ctx.rank + 1) * (r * kCalls + k + i % 5));
    sim::launchGraph(g, s);
    sim::synchronize(s);
    for (int k = 0; k < kCalls; ++k)
      for (size_t i = 0; i < count && !fails; ++i)
        if (out[k][i] != sumRanks * static_cast<float>(r * kCalls + k + i % 5))
          fails += failf(ctx, "replay %d call %d element %zu: %g", r, k, i, out[k][i]);
  }
  if (tern::stagedCalls() != staged) fails += failf(ctx, "replays staged new calls");
  sim::destroyGraph(g);
  if (tern::stagedInFlight() != 0) fails += failf(ctx, "the graph's buffers did not go back");
  ternRedOpDestroy(premul, comm);
  return fails;
}

TEST(DeviceSimCapture, AGraphOfTenAllreducesReplaysTenTimesWithCorrectResults) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), captureBody, 1, 60));
  expectAllRanksOk(runRanks(3, transportEnv("tcp"), captureBody, 1, 60));
}

// One rank on a stream: a collective is a device-to-device copy on the
// caller's stream (nothing in place), neither staged nor through the engine.
int oneRankBody(RankCtx& ctx) {
  sim::enable();
  ternComm_t comm = ctx.comm();
  sim::Stream* s = sim::newStream();
  ternStream_t st = reinterpret_cast<ternStream_t>(s);
  const size_t count = 1000, bytes = count * 4;
  void* a = sim::alloc(bytes);
  void* b = sim::alloc(bytes);
  std::vector<float> in(count), out(count, 0.0f);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i) * 0.5f;
  sim::memcpyAsync(s, a, in.data(), bytes);
  int fails = 0;
  if (ternAllReduce(a, b, count, ternFloat32, ternAvg, comm, st) != ternSuccess ||
      ternAllGather(b, a, count, ternFloat32, comm, st) != ternSuccess ||
      ternAllReduce(a, a, count, ternFloat32, ternSum, comm, st) != ternSuccess)
    fails += failf(ctx, "one rank on a stream: %s", ternGetLastError(comm));
  sim::memcpyAsync(s, out.data(), a, bytes);
  sim::synchronize(s);
  if (out != in) fails += failf(ctx, "one rank's result is not its input");
  if (tern::stagedCalls() != 0) fails += failf(ctx, "one rank's calls were staged");
  return fails;
}

TEST(DeviceSimOneRank, ACollectiveIsACopyOnTheStream) {
  expectAllRanksOk(runRanks(1, transportEnv("shm"), oneRankBody, 1, 60));
}

// Every message of the cases above on shm's low-latency stream (transport/ll.h):
// its views are private buffers, so an asynchronous burst there must settle
// before the next (it once read bytes of the next burst: wrong sums).
TEST(DeviceSimSmall, EveryCollectiveOnTheLowLatencyStream) {
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_LL_BYTES", "32768"}}), deviceBody, 2, 120));
}

INSTANTIATE_TEST_SUITE_P(Transports, DeviceSim,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(2, 3),
                                            ::testing::Values("staged", "engine")),
                         [](const auto& info) { return transportRanksName(info); });

// Error feedback on device buffers: residuals on the (simulated) device,
// carried across calls, results bit-equal to the host path's.
int errorFeedbackBody(RankCtx& ctx) {
  sim::enable();
  Device d = simDevice(sim::newStream());
  return errorFeedbackSteps(ctx, d);
}

TEST(DeviceSimErrorFeedback, ResidualsOnTheDeviceMatchTheHostPathOverCalls) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), errorFeedbackBody, 3, 120));
  expectAllRanksOk(runRanks(3, transportEnv("tcp"), errorFeedbackBody, 3, 120));
}

// An operation whose stream never gets to it (earlier work that does not
// end) must not hang the communicator's end: ternCommAbort returns, and the
// caller's stream is released (its later work runs once the gate opens).
int abortBody(RankCtx& ctx) {
  sim::enable();
  ternComm_t comm = ctx.comm();
  sim::Stream* s = sim::newStream();
  auto gate = std::make_shared<sim::Latch>();
  sim::enqueue(s, [gate] { gate->wait(); });
  void* d = sim::alloc(4096);
  int fails = 0;
  if (ternAllReduce(d, d, 1024, ternFloat32, ternSum, comm, reinterpret_cast<ternStream_t>(s)) !=
      ternSuccess)
    fails += failf(ctx, "allreduce on a stream: %s", ternGetLastError(comm));
  bool after = false;
  sim::enqueue(s, [&after] { after = true; });
  if (ternCommAbort(comm) != ternSuccess) fails += failf(ctx, "abort failed");
  gate->release();
  sim::synchronize(s);  // would hang if the stream were still held
  if (!after) fails += failf(ctx, "the stream's later work did not run");
  return fails;
}

TEST(DeviceSimAbort, AnOperationWaitingForItsStreamDoesNotHangAbort) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), abortBody, 1, 60));
}

// Inside a group the streams are followed and held at the group's end, as
// NCCL does.  Work enqueued between the calls and ternGroupEnd (here the
// send buffer's real contents; zeros before) comes before the operations;
// and a send/recv pair on one stream larger than the fifo (each send ends
// only once the peer's recv reads) must not wait for its own recv's hold:
// when each call held the stream as it was made, this hung.
int groupEndBody(RankCtx& ctx) {
  sim::enable();
  ternComm_t comm = ctx.comm();
  sim::Stream* s = sim::newStream();
  ternStream_t st = reinterpret_cast<ternStream_t>(s);
  const size_t count = size_t(1) << 20, bytes = count * 4;  // 4 MiB through a 1 MiB fifo
  const int peer = 1 - ctx.rank;
  std::vector<float> in = caseInputs(ctx.rank, count), zeros(count, 0.0f), out(count);
  void* send = sim::alloc(bytes);
  void* recv = sim::alloc(bytes);
  sim::memcpyAsync(s, send, zeros.data(), bytes);
  ternGroupStart();
  ternSend(send, count, ternFloat32, peer, comm, st);
  ternRecv(recv, count, ternFloat32, peer, comm, st);
  sim::memcpyAsync(s, send, in.data(), bytes);  // before the group's end: the send carries it
  ternResult_t r = ternGroupEnd();
  sim::memcpyAsync(s, out.data(), recv, bytes);
  sim::synchronize(s);
  int fails = 0;
  if (r != ternSuccess) fails += failf(ctx, "group: %s", ternGetLastError(comm));
  if (out != caseInputs(peer, count))
    fails += failf(ctx, "the data received is not what rank %d's stream held at the group's end", peer);
  if (ternCommDestroy(comm) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails;
}

TEST(DeviceSimGroup, StreamsAreFollowedAndHeldAtTheGroupEnd) {
  for (const char* t : {"shm", "tcp"})
    expectAllRanksOk(runRanks(2, transportEnv(t, {{"TERN_BUFFSIZE", "1048576"}, {"TERN_SHM_IPC", "0"}}),
                              groupEndBody, 1, 60));
}

// Expects `r` to be `want` with a sentence that contains `word`.
int expectRefused(RankCtx& ctx, ternComm_t comm, ternResult_t r, ternResult_t want,
                  const char* word, const char* what) {
  const char* msg = ternGetLastError(comm);
  if (r == want && strstr(msg, word)) return 0;
  return failf(ctx, "%s: got %d (\"%s\"), want %d with \"%s\"", what, r, msg, want, word);
}

// What cannot run on a stream is refused at the call, with a sentence, and
// the communicator stays usable.
int refusalsBody(RankCtx& ctx) {
  ternComm_t comm = ctx.comm();
  float host[64] = {0};
  int fails = 0;
  ternStream_t fake = reinterpret_cast<ternStream_t>(0x1);  // CUDA's legacy default stream
  if (!tern::cudaUsable())  // this machine (CI): no device, no simulated one yet
    fails += expectRefused(ctx, comm, ternAllReduce(host, host, 64, ternFloat32, ternSum, comm, fake),
                           ternInvalidArgument, "no usable CUDA device", "no device");
  sim::enable();
  sim::Stream* s = sim::newStream();
  ternStream_t st = reinterpret_cast<ternStream_t>(s);
  void* dev = sim::alloc(256);
  fails += expectRefused(ctx, comm, ternAllReduce(host, host, 64, ternFloat32, ternSum, comm, st),
                         ternInvalidArgument, "sendbuff is host memory", "host buffers");
  fails += expectRefused(ctx, comm, ternAllReduce(dev, host, 64, ternFloat32, ternSum, comm, st),
                         ternInvalidArgument, "sendbuff is device memory but recvbuff is host memory",
                         "mixed");
  // Still usable, on the host path and on the stream.
  if (ternAllReduce(host, host, 64, ternFloat32, ternSum, comm, nullptr) != ternSuccess)
    fails += failf(ctx, "host allreduce after the refusals: %s", ternGetLastError(comm));
  if (ternAllReduce(dev, dev, 64, ternFloat32, ternSum, comm, st) != ternSuccess)
    fails += failf(ctx, "device allreduce after the refusals: %s", ternGetLastError(comm));
  sim::synchronize(s);
  if (ternCommDestroy(comm) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails;
}

TEST(DeviceSimRefusals, HostOrMixedBuffersOnAStreamAndNoDevice) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), refusalsBody, 1, 60));
}

}  // namespace
