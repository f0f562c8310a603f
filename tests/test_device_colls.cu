// Device buffers on a CUDA stream through tern, on a GPU (perf/gpu/run.sh
// runs it; without a device it exits 77 and ctest reports it as not run,
// never as passed).  Real processes, 2 and 3 ranks (one GPU shared is fine:
// rank r uses device r % count), shm and tcp: every collective, send/recv,
// PreMulSum ops (allreduce, reduce, reduce-scatter; host-immediate scalars
// and device scalars written on the stream just before the call; float,
// 16-bit and integer types) and the ternary allreduce on cudaMalloc'ed
// buffers against the host path
// bit for bit (the ternary one through a second communicator, so both runs
// draw the same Philox counters: device codes equal the CPU codec's), with
// a spinning kernel and the inputs' copy enqueued before each call and a
// kernel reading the result enqueued after it (tests/device_cases.h).
// DeviceCollsErrorFeedback: the ternary allreduce with error feedback over
// several calls, residuals in device memory updated by the fused encode
// kernel, each call bit-equal to the host path's.
// Over shm the large plain transfers go CUDA IPC (TERN_SHM_IPC's default);
// DeviceCollsIpc checks that path moves nothing through host memory.
//
// CUDA is initialised in the ranks only (fork does not carry a context):
// the parent asks a child process how many devices there are.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <tuple>

#include "device_cases.h"
#include "harness.h"

using namespace terntest;

namespace {

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}

__global__ void copyWords(unsigned char* dst, const unsigned char* src, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = src[i];
}

int deviceCount = 0;

// About 50 ms of the device's clock: long enough that an operation which did
// not wait for it would read the inputs before they are copied in.
long long spinCycles(int dev) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
  return static_cast<long long>(khz) * 50;
}

Device gpuDevice(cudaStream_t s, int dev) {
  Device d;
  d.stream = reinterpret_cast<ternStream_t>(s);
  d.alloc = [](size_t n) {
    void* p = nullptr;
    return cudaMalloc(&p, n) == cudaSuccess ? p : nullptr;  // freed with the process
  };
  const long long cycles = spinCycles(dev);
  d.holdBack = [s, cycles] { spin<<<1, 1, 0, s>>>(cycles); };
  d.upload = [s](void* dev, const void* host, size_t n) {
    cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s);
  };
  // A kernel reads the result on the stream (the work after the call), then
  // its copy goes to the host.
  d.download = [s](void* host, const void* dev, size_t n) {
    void* snap = nullptr;
    if (cudaMallocAsync(&snap, n, s) != cudaSuccess) return;
    copyWords<<<64, 256, 0, s>>>(static_cast<unsigned char*>(snap),
                                 static_cast<const unsigned char*>(dev), n);
    cudaMemcpyAsync(host, snap, n, cudaMemcpyDeviceToHost, s);
    cudaFreeAsync(snap, s);
  };
  d.letGo = [] {};
  d.sync = [s] { cudaStreamSynchronize(s); };
  return d;
}

// Runs `suite` on this rank's device (rank r on device r % count).
int onGpu(RankCtx& ctx, int (*suite)(RankCtx&, Device&)) {
  const int dev = ctx.rank % deviceCount;
  if (cudaSetDevice(dev) != cudaSuccess) return failf(ctx, "cudaSetDevice(%d) failed", dev);
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)  // as PyTorch's
    return failf(ctx, "no stream");
  Device d = gpuDevice(s, dev);
  int fails = suite(ctx, d);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fails += failf(ctx, "CUDA error: %s", cudaGetErrorString(e));
  return fails;
}

int gpuBody(RankCtx& ctx) { return onGpu(ctx, deviceSuite); }

// CUDA IPC between the ranks (processes) of this host: the plain transfers
// device to device from the peer's cudaMalloc'ed buffer, nothing staged
// through host memory (tests/device_cases.h).  With one GPU both ranks are
// on it: IPC between two processes of one device.
int ipcBody(RankCtx& ctx) {
  return onGpu(ctx, [](RankCtx& c, Device& d) { return plainTransfersOverIpc(c, d, 100000); });
}

int errorFeedbackBody(RankCtx& ctx) { return onGpu(ctx, errorFeedbackSteps); }

// The staged path (memory/staged.h, small calls by default) and the
// engine's device path (TERN_STAGED_MAX_BYTES=0).
using Param = std::tuple<std::string, int, std::string>;
class DeviceColls : public ::testing::TestWithParam<Param> {};

TEST_P(DeviceColls, EveryCollectiveOnDeviceBuffersMatchesTheHostPathInStreamOrder) {
  auto [transport, nranks, path] = GetParam();
  auto env = transportEnv(transport);
  if (path == "engine") env["TERN_STAGED_MAX_BYTES"] = "0";
  expectAllRanksOk(runRanks(nranks, env, gpuBody, 2, 300));
}

TEST(DeviceCollsIpc, PlainTransfersGoDeviceToDeviceOverCudaIpc) {
  printf("CUDA IPC: 2 ranks on %s\n", deviceCount > 1 ? "two GPUs" : "one GPU (two processes share it)");
  // IPC is the engine's device path: calls this small would be staged.
  expectAllRanksOk(runRanks(2, transportEnv("shm", {{"TERN_SHM_IPC", "1"}, {"TERN_STAGED_MAX_BYTES", "0"}}),
                            ipcBody, 2, 300));
}

TEST(DeviceCollsErrorFeedback, ResidualsOnTheDeviceMatchTheHostPathOverCalls) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), errorFeedbackBody, 3, 300));
  expectAllRanksOk(runRanks(3, transportEnv("tcp"), errorFeedbackBody, 3, 300));
}

// CUDA graph capture (the same check as DeviceSimCapture, with real graphs):
// 10 allreduces and their copies captured on one stream, the graph replayed
// 10 times with new inputs in pinned host memory: 100 allreduces, each
// checked.  PyTorch's default (global) capture mode.
int captureBody(RankCtx& ctx) {
  const int dev = ctx.rank % deviceCount;
  if (cudaSetDevice(dev) != cudaSuccess) return failf(ctx, "cudaSetDevice(%d) failed", dev);
  ternComm_t comm = ctx.comm();
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  constexpr int kCalls = 10, kReplays = 10;
  const size_t count = 2048, bytes = count * 4;
  float *in, *out;
  cudaHostAlloc(&in, kCalls * bytes, cudaHostAllocDefault);
  cudaHostAlloc(&out, kCalls * bytes, cudaHostAllocDefault);
  std::vector<void*> buf(kCalls);
  for (void*& b : buf) cudaMalloc(&b, bytes);
  int fails = 0;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess)
    return failf(ctx, "cudaStreamBeginCapture failed");
  for (int k = 0; k < kCalls; ++k) {
    cudaMemcpyAsync(buf[k], in + k * count, bytes, cudaMemcpyHostToDevice, s);
    if (ternAllReduce(buf[k], buf[k], count, ternFloat32, ternSum, comm, reinterpret_cast<ternStream_t>(s)) !=
        ternSuccess)
      fails += failf(ctx, "captured allreduce %d: %s", k, ternGetLastError(comm));
    cudaMemcpyAsync(out + k * count, buf[k], bytes, cudaMemcpyDeviceToHost, s);
  }
  cudaGraph_t g = nullptr;
  if (cudaStreamEndCapture(s, &g) != cudaSuccess) return fails + failf(ctx, "cudaStreamEndCapture failed");
  cudaGraphExec_t x;
  if (cudaGraphInstantiate(&x, g, 0) != cudaSuccess) return fails + failf(ctx, "cudaGraphInstantiate failed");
  const float sumRanks = static_cast<float>(ctx.nranks * (ctx.nranks + 1) / 2);
  for (int r = 0; r < kReplays && !fails; ++r) {
    for (int k = 0; k < kCalls; ++k)
      for (size_t i = 0; i < count; ++i) in[k * count + i] = static_cast<float>((ctx.rank + 1) * (r * kCalls + k + i % 5));
    cudaGraphLaunch(x, s);
    cudaStreamSynchronize(s);
    for (int k = 0; k < kCalls; ++k)
      for (size_t i = 0; i < count && !fails; ++i)
        if (out[k * count + i] != sumRanks * static_cast<float>(r * kCalls + k + i % 5))
          fails += failf(ctx, "replay %d call %d element %zu: %g", r, k, i, out[k * count + i]);
  }
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fails += failf(ctx, "CUDA error: %s", cudaGetErrorString(e));
  return fails;
}

TEST(DeviceCollsCapture, AGraphOfTenAllreducesReplaysTenTimesWithCorrectResults) {
  expectAllRanksOk(runRanks(2, transportEnv("shm"), captureBody, 1, 120));
  expectAllRanksOk(runRanks(3, transportEnv("tcp"), captureBody, 1, 120));
}

INSTANTIATE_TEST_SUITE_P(Transports, DeviceColls,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(2, 3),
                                            ::testing::Values("staged", "engine")),
                         [](const auto& info) { return transportRanksName(info); });

// The device count, asked in a child process so this one stays without a
// CUDA context for the ranks it forks.
int countDevicesInAChild() {
  int fd[2];
  if (pipe(fd) != 0) return 0;
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    (void)!write(fd[1], &n, sizeof n);
    _exit(0);
  }
  close(fd[1]);
  int n = 0;
  if (read(fd[0], &n, sizeof n) != sizeof n) n = 0;
  close(fd[0]);
  waitpid(pid, nullptr, 0);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  deviceCount = countDevicesInAChild();
  if (deviceCount == 0) {
    printf("test_device_colls: no CUDA device usable: GPU checks NOT RUN\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
