// Device buffers on a stream through the whole engine, on the simulated
// device (src/memory/simulated.h): CI has no GPU, so this stand-in runs the
// asynchronous memory path that CUDA uses (operation begun on the caller's
// thread, started once the stream's earlier work is done, bursts fenced,
// the caller's stream held until the operation ends).  Its device addresses
// fault when the host touches them, so a host dereference crashes a rank and
// fails the test.  Real processes, real shm / tcp connections.
//
// Each rank checks, for every collective and send/recv: the call returns
// before the stream's earlier work (held back by a gate) has run and the
// operation is still in flight then; once the gate opens, the result read
// back by work enqueued after the call equals the host path's result for
// the same inputs (the ternary allreduce's too, bit for bit: its codec runs
// as the memory type's kernels on the stream, and the same Philox counters
// give the same codes).
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "harness.h"
#include "memory/cuda_runtime_probe.h"
#include "memory/simulated.h"

using namespace terntest;
namespace sim = tern::sim;

namespace {

// Work on a stream that waits until the test opens it: the "earlier work"
// that the operation must wait for.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return open; });
  }
  void release() {
    std::lock_guard<std::mutex> lk(m);
    open = true;
    cv.notify_all();
  }
};

constexpr unsigned char kSentinel = 0xab;

// One call, on host buffers (stream NULL) or device buffers on `stream`.
using Call = std::function<ternResult_t(const void* send, void* recv, ternStream_t stream)>;

struct Case {
  std::string name;
  size_t sendBytes, recvBytes;
  Call call;
  bool recvUsed = true;  // this rank's recvbuff is written (a root-only output elsewhere)
  ternComm_t deviceComm = nullptr;  // where the device run goes (nullptr: the host run's)
};

std::vector<float> inputs(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 1000));
  return v;
}

// Runs one case on the device, gated; compares with the host path.
int runCase(RankCtx& ctx, ternComm_t comm, sim::Stream* s, const Case& c) {
  std::vector<float> in = inputs(ctx.rank, c.sendBytes / 4 + 1);
  std::vector<unsigned char> ref(c.recvBytes + 1, kSentinel), got(c.recvBytes + 1, 0);
  if (c.call(in.data(), ref.data(), nullptr) != ternSuccess)
    return failf(ctx, "%s on host buffers: %s", c.name.c_str(), ternGetLastError(comm));

  void* sendD = sim::alloc(c.sendBytes + 4);
  void* recvD = sim::alloc(c.recvBytes + 1);
  std::vector<unsigned char> sentinel(c.recvBytes + 1, kSentinel);
  auto gate = std::make_shared<Gate>();
  sim::enqueue(s, [gate] { gate->wait(); });
  sim::memcpyAsync(s, sendD, in.data(), c.sendBytes);
  sim::memcpyAsync(s, recvD, sentinel.data(), sentinel.size());
  ternResult_t r = c.call(sendD, recvD, reinterpret_cast<ternStream_t>(s));
  ternResult_t state = ternSuccess;
  ternCommGetAsyncError(c.deviceComm ? c.deviceComm : comm, &state);
  sim::memcpyAsync(s, got.data(), recvD, got.size());  // work after the call
  gate->release();
  sim::synchronize(s);
  int fails = 0;
  if (r != ternSuccess)
    return failf(ctx, "%s on a stream: %d (%s)", c.name.c_str(), r, ternGetLastError(comm));
  if (state != ternInProgress)
    fails += failf(ctx, "%s: the call waited (state %d), or ran before the stream's earlier work",
                   c.name.c_str(), state);
  if (!c.recvUsed) return fails;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != ref[i])
      return fails + failf(ctx, "%s: byte %zu is %u on the device path, %u on the host path",
                           c.name.c_str(), i, got[i], ref[i]);
  return fails;
}

// `comm2`: a second communicator over the same ranks, for the ternary
// allreduce's device run (the host run on `comm`): the k-th call on each
// draws the same Philox counters, so the codes, and so the results, must be
// bit-identical.
std::vector<Case> cases(ternComm_t comm, ternComm_t comm2, int n, int me, size_t count) {
  const size_t b = count * 4;
  const int root = n - 1, next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<Case> v;
  auto add = [&](const char* name, size_t sb, size_t rb, Call call, bool used = true) {
    v.push_back(Case{std::string(name) + " of " + std::to_string(count), sb, rb, std::move(call), used});
  };
  add("allreduce sum", b, b, [=](const void* s, void* r, ternStream_t st) {
    return ternAllReduce(s, r, count, ternFloat32, ternSum, comm, st);
  });
  add("allreduce avg", b, b, [=](const void* s, void* r, ternStream_t st) {
    return ternAllReduce(s, r, count, ternFloat32, ternAvg, comm, st);
  });
  add("allreduce max int32", b, b, [=](const void* s, void* r, ternStream_t st) {
    return ternAllReduce(s, r, count, ternInt32, ternMax, comm, st);
  });
  add("broadcast", b, b, [=](const void* s, void* r, ternStream_t st) {
    return ternBroadcast(s, r, count, ternFloat32, root, comm, st);
  });
  add("reduce", b, b, [=](const void* s, void* r, ternStream_t st) {
    return ternReduce(s, r, count, ternFloat32, ternSum, root, comm, st);
  }, me == root);
  add("allgather", b, b * n, [=](const void* s, void* r, ternStream_t st) {
    return ternAllGather(s, r, count, ternFloat32, comm, st);
  });
  add("reduce-scatter", b * n, b, [=](const void* s, void* r, ternStream_t st) {
    return ternReduceScatter(s, r, count, ternFloat32, ternSum, comm, st);
  });
  add("all-to-all", b * n, b * n, [=](const void* s, void* r, ternStream_t st) {
    return ternAllToAll(s, r, count, ternFloat32, comm, st);
  });
  add("gather", b, b * n, [=](const void* s, void* r, ternStream_t st) {
    return ternGather(s, r, count, ternFloat32, root, comm, st);
  }, me == root);
  add("scatter", b * n, b, [=](const void* s, void* r, ternStream_t st) {
    return ternScatter(s, r, count, ternFloat32, root, comm, st);
  });
  add("ternary allreduce", b, b, [=](const void* s, void* r, ternStream_t st) {
    return ternAllReduceTernary(s, r, count, ternFloat32, ternAvg, st ? comm2 : comm, st);
  });
  v.back().deviceComm = comm2;
  add("send/recv ring in a group", b, b, [=](const void* s, void* r, ternStream_t st) {
    ternGroupStart();
    ternSend(s, count, ternFloat32, next, comm, st);
    ternRecv(r, count, ternFloat32, prev, comm, st);
    return ternGroupEnd();
  });
  return v;
}

// Three in-place allreduces back to back on one stream, nothing waited for
// between them: each must start after the one before it ended.
int chained(RankCtx& ctx, ternComm_t comm, sim::Stream* s) {
  const size_t count = 70000;
  std::vector<float> x(count, 1.0f), out(count);
  void* d = sim::alloc(count * 4);
  sim::memcpyAsync(s, d, x.data(), count * 4);
  for (int k = 0; k < 3; ++k)
    if (ternAllReduce(d, d, count, ternFloat32, ternSum, comm, reinterpret_cast<ternStream_t>(s)) !=
        ternSuccess)
      return failf(ctx, "chained allreduce %d: %s", k, ternGetLastError(comm));
  sim::memcpyAsync(s, out.data(), d, count * 4);
  sim::synchronize(s);
  const float want = static_cast<float>(ctx.nranks * ctx.nranks * ctx.nranks);
  for (size_t i = 0; i < count; ++i)
    if (out[i] != want) return failf(ctx, "chained: element %zu is %g, want %g", i, out[i], want);
  return 0;
}

int deviceBody(RankCtx& ctx) {
  sim::enable();
  ternComm_t comm = ctx.comm(0), comm2 = ctx.comm(1);
  sim::Stream* s = sim::newStream();
  int fails = 0;
  // 1000 elements: one burst; 100000 (400 KB): several bursts and fences.
  for (size_t count : {size_t(1000), size_t(100000)})
    for (const Case& c : cases(comm, comm2, ctx.nranks, ctx.rank, count))
      fails += runCase(ctx, comm, s, c);
  ternTernaryStats_t st{};
  ternCommGetTernaryStats(comm2, &st);
  if (st.calls != 2 || st.calls - st.fallbacks < 1)
    fails += failf(ctx, "ternary on the device: %llu calls, %llu dense; want 2, at least one coded",
                   (unsigned long long)st.calls, (unsigned long long)st.fallbacks);
  fails += chained(ctx, comm, s);
  for (ternComm_t c : {comm, comm2})
    if (ternCommDestroy(c) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails;
}

using Param = std::tuple<std::string, int>;
class DeviceSim : public ::testing::TestWithParam<Param> {};

TEST_P(DeviceSim, EveryCollectiveOnAStreamMatchesTheHostPathInStreamOrder) {
  auto [transport, nranks] = GetParam();
  expectAllRanksOk(runRanks(nranks, transportEnv(transport), deviceBody, 2, 120));
}

INSTANTIATE_TEST_SUITE_P(Transports, DeviceSim,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(2, 3)),
                         [](const auto& info) { return transportRanksName(info); });

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
  ternTernaryConfig_t cfg;
  ternCommGetTernaryConfig(comm, &cfg);
  cfg.errorFeedback = 1;
  ternCommSetTernaryConfig(comm, &cfg);
  fails += expectRefused(ctx, comm,
                         ternAllReduceTernary(dev, dev, 64, ternFloat32, ternSum, comm, st),
                         ternInvalidUsage, "error feedback", "ternary with error feedback");
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
