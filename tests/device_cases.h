// Every collective and send/recv on device buffers on a stream, against the
// host path, in stream order: shared by the simulated device's test
// (test_device_sim.cc, CI) and the GPU's (test_device_colls.cu, on a device
// machine).  A Device says how to allocate, copy and order work on its
// stream; the checks are the same.
//
// Each case, per rank: the host run (stream NULL) gives the reference; then
// on the stream: work that holds the stream back (a gate, a spinning
// kernel), the inputs copied in, the call (it must return with the
// operation still in flight), the result copied out by work enqueued after
// the call; the bytes must equal the host run's.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codec/half.h"
#include "harness.h"
#include "memory/ipc.h"

namespace terntest {

struct Device {
  ternStream_t stream = nullptr;
  std::function<void*(size_t)> alloc;
  // Enqueued on the stream, in this order around the call.
  std::function<void()> holdBack;  // earlier work that keeps the stream busy
  std::function<void(void* dev, const void* host, size_t)> upload;
  std::function<void(void* host, const void* dev, size_t)> download;  // may run a kernel first
  std::function<void()> letGo;  // the held-back work may finish (after the call returned)
  std::function<void()> sync;
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

inline std::vector<float> caseInputs(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 1000));
  return v;
}

// Runs one case on the device; compares with the host path.
inline int runCase(RankCtx& ctx, ternComm_t comm, Device& d, const Case& c) {
  std::vector<float> in = caseInputs(ctx.rank, c.sendBytes / 4 + 1);
  std::vector<unsigned char> ref(c.recvBytes + 1, kSentinel), got(c.recvBytes + 1, 0);
  if (c.call(in.data(), ref.data(), nullptr) != ternSuccess)
    return failf(ctx, "%s on host buffers: %s", c.name.c_str(), ternGetLastError(comm));
  void* sendD = d.alloc(c.sendBytes + 4);
  void* recvD = d.alloc(c.recvBytes + 1);
  std::vector<unsigned char> sentinel(c.recvBytes + 1, kSentinel);
  d.holdBack();
  d.upload(sendD, in.data(), c.sendBytes);
  d.upload(recvD, sentinel.data(), sentinel.size());
  ternResult_t r = c.call(sendD, recvD, d.stream);
  ternResult_t state = ternSuccess;
  ternCommGetAsyncError(c.deviceComm ? c.deviceComm : comm, &state);
  d.download(got.data(), recvD, got.size());  // work after the call
  d.letGo();
  d.sync();
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
inline std::vector<Case> deviceCases(ternComm_t comm, ternComm_t comm2, int n, int me, size_t count) {
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

// One element of dt holding v (the PreMulSum scalars of the cases below).
inline std::vector<unsigned char> scalarOf(ternDataType_t dt, double v) {
  std::vector<unsigned char> b(8, 0);
  auto put = [&](auto x) { memcpy(b.data(), &x, sizeof x); };
  if (dt == ternFloat32) put(static_cast<float>(v));
  else if (dt == ternFloat64) put(v);
  else if (dt == ternInt32) put(static_cast<int32_t>(v));
  else if (dt == ternFloat16) put(tern::floatToHalf(static_cast<float>(v)));
  else if (dt == ternBfloat16) put(tern::floatToBf16(static_cast<float>(v)));
  return b;
}

// PreMulSum ops (ternRedOpCreatePreMulSum) in every collective that takes
// an op, against the host path bit for bit: float32 with a host-immediate
// scalar; float32 and int32 with a ternScalarDevice scalar, which on the
// stream is device memory written by a copy enqueued just before the call
// (behind the held-back work: the operation must read it in stream order,
// a stale read gives other bytes); float16 / bfloat16 (multiplied in
// float32, rounded once), float64.  The inputs are caseInputs' bytes read
// as each type.
inline std::vector<Case> preMulSumCases(ternComm_t comm, int n, int me, size_t count, Device& d) {
  const int root = n - 1;
  std::vector<Case> v;
  auto add = [&](const std::string& name, ternDataType_t dt, bool onDevice, double k, int kind) {
    const size_t es = ternTypeSize(dt), b = count * es;
    auto val = std::make_shared<std::vector<unsigned char>>(scalarOf(dt, k * (me + 1)));
    // The host run's op reads a host scalar; the stream run's a device one.
    // Not made: ternNumOps, which every call refuses (never a plain sum).
    ternRedOp_t hostOp = ternNumOps, devOp = ternNumOps;
    ternRedOpCreatePreMulSum(&hostOp, val->data(), dt,
                             onDevice ? ternScalarDevice : ternScalarHostImmediate, comm);
    void* devScalar = onDevice ? d.alloc(8) : nullptr;
    if (onDevice) ternRedOpCreatePreMulSum(&devOp, devScalar, dt, ternScalarDevice, comm);
    else devOp = hostOp;
    Device* dev = &d;
    auto prep = [=](ternStream_t st) {
      if (st && devScalar) dev->upload(devScalar, val->data(), es);
      return st ? devOp : hostOp;
    };
    const std::string full = "premulsum " + name + " of " + std::to_string(count);
    if (kind == 0)
      v.push_back(Case{full, b, b, [=](const void* s, void* r, ternStream_t st) {
        return ternAllReduce(s, r, count, dt, prep(st), comm, st);
      }});
    else if (kind == 1)
      v.push_back(Case{full, b, b, [=](const void* s, void* r, ternStream_t st) {
        return ternReduce(s, r, count, dt, prep(st), root, comm, st);
      }, me == root});
    else
      v.push_back(Case{full, b * n, b, [=](const void* s, void* r, ternStream_t st) {
        return ternReduceScatter(s, r, count, dt, prep(st), comm, st);
      }});
  };
  add("allreduce float32 host scalar", ternFloat32, false, 0.5, 0);
  add("allreduce float32 device scalar", ternFloat32, true, 0.75, 0);
  add("allreduce int32 device scalar", ternInt32, true, 3, 0);
  add("reduce bfloat16", ternBfloat16, false, 1.5, 1);
  add("reduce float64 device scalar", ternFloat64, true, 0.25, 1);
  add("reduce-scatter float16", ternFloat16, false, 0.25, 2);
  add("reduce-scatter int32 device scalar", ternInt32, true, 5, 2);
  return v;
}

// The host path's PreMulSum against the arithmetic: allreduce of float32
// inputs x_q scaled by (q + 1) is sum_q (q + 1) x_q (small integers, exact),
// and the caller's input is left as it was.
inline int preMulSumValues(RankCtx& ctx, ternComm_t comm) {
  const size_t count = 5000;
  std::vector<float> x = caseInputs(ctx.rank, count), out(count);
  const float k = static_cast<float>(ctx.rank + 1);
  ternRedOp_t op = ternNumOps;
  if (ternRedOpCreatePreMulSum(&op, const_cast<float*>(&k), ternFloat32, ternScalarHostImmediate,
                               comm) != ternSuccess ||
      ternAllReduce(x.data(), out.data(), count, ternFloat32, op, comm, nullptr) != ternSuccess)
    return failf(ctx, "premulsum on host buffers: %s", ternGetLastError(comm));
  int fails = ternRedOpDestroy(op, comm) != ternSuccess;
  if (ternAllReduce(x.data(), out.data(), count, ternFloat32, op, comm, nullptr) != ternInvalidArgument)
    fails += failf(ctx, "a destroyed premulsum op was accepted");
  const std::vector<float> mine = caseInputs(ctx.rank, count);
  for (size_t i = 0; i < count; ++i) {
    float want = 0;  // caseInputs(q)[i], times q + 1
    for (int q = 0; q < ctx.nranks; ++q) want += (q + 1) * static_cast<float>((q + 1) * 3 + static_cast<int>(i % 1000));
    if (out[i] != want) return fails + failf(ctx, "premulsum: element %zu is %g, want %g", i, out[i], want);
    if (x[i] != mine[i]) return fails + failf(ctx, "premulsum changed the input");
  }
  return fails;
}

// Three in-place allreduces back to back on one stream, nothing waited for
// between them: each must start after the one before it ended.
inline int chainedOnOneStream(RankCtx& ctx, ternComm_t comm, Device& d) {
  const size_t count = 70000;
  std::vector<float> x(count, 1.0f), out(count);
  void* p = d.alloc(count * 4);
  d.upload(p, x.data(), count * 4);
  for (int k = 0; k < 3; ++k)
    if (ternAllReduce(p, p, count, ternFloat32, ternSum, comm, d.stream) != ternSuccess)
      return failf(ctx, "chained allreduce %d: %s", k, ternGetLastError(comm));
  d.download(out.data(), p, count * 4);
  d.sync();
  const float want = static_cast<float>(ctx.nranks * ctx.nranks * ctx.nranks);
  for (size_t i = 0; i < count; ++i)
    if (out[i] != want) return failf(ctx, "chained: element %zu is %g, want %g", i, out[i], want);
  return 0;
}

// Every case at two sizes (one burst; several bursts and fences), the ternary
// allreduce's compression actually used, then the chained calls.
inline int deviceSuite(RankCtx& ctx, Device& d) {
  ternComm_t comm = ctx.comm(0), comm2 = ctx.comm(1);
  int fails = 0;
  for (size_t count : {size_t(1000), size_t(100000)}) {
    for (const Case& c : deviceCases(comm, comm2, ctx.nranks, ctx.rank, count))
      fails += runCase(ctx, comm, d, c);
    for (const Case& c : preMulSumCases(comm, ctx.nranks, ctx.rank, count, d))
      fails += runCase(ctx, comm, d, c);
  }
  fails += preMulSumValues(ctx, comm);
  ternTernaryStats_t st{};
  ternCommGetTernaryStats(comm2, &st);
  if (st.calls != 2 || st.calls - st.fallbacks < 1)
    fails += failf(ctx, "ternary on the device: %llu calls, %llu dense; want 2, at least one coded",
                   (unsigned long long)st.calls, (unsigned long long)st.fallbacks);
  fails += chainedOnOneStream(ctx, comm, d);
  for (ternComm_t c : {comm, comm2})
    if (ternCommDestroy(c) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails;
}

// Error feedback (TERN_TERNARY_EF) on device buffers over several calls of
// one tensor: its residuals live on the device (the communicator's ternary
// state owns them) and are carried from call to call; each call's result
// must equal, bit for bit, the host path's on comm 0 (residuals in host
// memory).  Comm 1 runs on the device, comm 2 on the host without error
// feedback: it equals comm 0 on the first call (residuals start at zero)
// and differs after, so the residuals did something.  Odd calls in place;
// the tensor is released (ternCommReleaseTensor) before call 3 on both
// sides, so the residuals start over alike.  Needs 3 communicator ids.
inline int errorFeedbackSteps(RankCtx& ctx, Device& d) {
  ternComm_t host = ctx.comm(0), dev = ctx.comm(1), plain = ctx.comm(2);
  for (ternComm_t c : {host, dev, plain}) {
    ternTernaryConfig_t cfg;
    ternCommGetTernaryConfig(c, &cfg);
    cfg.errorFeedback = c != plain;
    cfg.minBytes = 0;
    ternCommSetTernaryConfig(c, &cfg);
  }
  const size_t count = 100003, bytes = count * 4;  // several bursts, a ragged last group
  const void* tensor = &count;                     // any handle: the same one on every call
  void* sendD = d.alloc(bytes);
  void* recvD = d.alloc(bytes);
  int fails = 0;
  for (int call = 0; call < 5; ++call) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i)  // gradient-like: spread signs and sizes, new every call
      in[i] = static_cast<float>(static_cast<int>((i * 2654435761u + 977u * call + 131u * ctx.rank) % 2001) - 1000) *
              (1e-3f + 1e-4f * static_cast<float>(i % 7));
    const bool inPlace = call % 2 == 1;
    if (call == 3)
      for (ternComm_t c : {host, dev}) ternCommReleaseTensor(c, tensor);
    std::vector<float> a = in, outA(count), b = in, outB(count), got(count);
    float* resA = inPlace ? a.data() : outA.data();
    float* resB = inPlace ? b.data() : outB.data();
    void* resD = inPlace ? sendD : recvD;
    ternResult_t r1 = ternAllReduceTernaryEx(a.data(), resA, count, ternFloat32, ternAvg, tensor, host, nullptr);
    ternResult_t r2 = ternAllReduceTernaryEx(b.data(), resB, count, ternFloat32, ternAvg, tensor, plain, nullptr);
    d.upload(sendD, in.data(), bytes);
    ternResult_t r3 = ternAllReduceTernaryEx(sendD, resD, count, ternFloat32, ternAvg, tensor, dev, d.stream);
    d.download(got.data(), resD, bytes);
    d.sync();
    if (r1 != ternSuccess || r2 != ternSuccess || r3 != ternSuccess)
      return fails + failf(ctx, "error feedback call %d: %d %d %d (%s)", call, r1, r2, r3,
                           ternGetLastError(r3 != ternSuccess ? dev : host));
    if (memcmp(got.data(), resA, bytes) != 0)
      fails += failf(ctx, "error feedback call %d: the device result differs from the host path's", call);
    const bool same = memcmp(resA, resB, bytes) == 0;
    if (same != (call == 0 || call == 3))
      fails += failf(ctx, "error feedback call %d: %s the result without error feedback", call,
                     same ? "equals" : "differs from");
  }
  ternTernaryStats_t st{};
  ternCommGetTernaryStats(dev, &st);
  if (st.calls != 5 || st.fallbacks != 0)
    fails += failf(ctx, "error feedback on the device: %llu calls, %llu dense; want 5 coded",
                   (unsigned long long)st.calls, (unsigned long long)st.fallbacks);
  for (ternComm_t c : {host, dev, plain})
    if (ternCommDestroy(c) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails;
}

// The bytes a plain transfer's rank receives from peers (SIZE_MAX: the
// case reduces or forwards on the way, so it stays in the fifo).
inline size_t fromPeers(const std::string& name, int n, int me, size_t bytes) {
  const int root = n - 1;
  auto is = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  if (is("send/recv")) return bytes;
  if (is("all-to-all")) return (n - 1) * bytes;
  if (is("gather")) return me == root ? (n - 1) * bytes : 0;
  if (is("scatter")) return me == root ? 0 : bytes;
  return SIZE_MAX;
}

// The plain transfers (send/recv, all-to-all, gather, scatter) between
// ranks of one host with IPC on (TERN_SHM_IPC), at `count` elements (large
// enough that all-to-all's blocks are plain transfers too): each equals the
// host path, moves no byte through host memory, and brings exactly what
// came from peers over IPC (memory/ipc.h's counters).  Prints the path each
// rank's transfers took.
inline int plainTransfersOverIpc(RankCtx& ctx, Device& d, size_t count) {
  ternComm_t comm = ctx.comm(0), comm2 = ctx.comm(1);
  int fails = 0, plain = 0;
  tern::DeviceTraffic total{};
  for (const Case& c : deviceCases(comm, comm2, ctx.nranks, ctx.rank, count)) {
    const size_t want = fromPeers(c.name, ctx.nranks, ctx.rank, count * 4);
    if (want == SIZE_MAX) continue;
    ++plain;
    const tern::DeviceTraffic before = tern::deviceTraffic();
    fails += runCase(ctx, comm, d, c);
    const tern::DeviceTraffic after = tern::deviceTraffic();
    total.staged += after.staged - before.staged;
    total.ipc += after.ipc - before.ipc;
    if (after.staged != before.staged)
      fails += failf(ctx, "%s: %llu bytes staged through host memory on the IPC path", c.name.c_str(),
                     (unsigned long long)(after.staged - before.staged));
    if (after.ipc - before.ipc != want)
      fails += failf(ctx, "%s: %llu bytes over IPC, want %zu", c.name.c_str(),
                     (unsigned long long)(after.ipc - before.ipc), want);
  }
  printf("rank %d: plain transfers took %s (%llu bytes device to device from peers, %llu staged "
         "through host memory)\n",
         ctx.rank, total.ipc && !total.staged ? "the IPC path" : "the staging path",
         (unsigned long long)total.ipc, (unsigned long long)total.staged);
  if (plain != 4) fails += failf(ctx, "%d plain-transfer cases found, want 4", plain);
  for (ternComm_t c : {comm, comm2})
    if (ternCommDestroy(c) != ternSuccess) fails += failf(ctx, "destroy failed");
  return fails;
}

}  // namespace terntest
