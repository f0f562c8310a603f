// The host cost of enqueuing one collective on device buffers, on the
// simulated device (CI has no GPU): the caller's time inside ternAllReduce
// on a stream, 1024 floats, 2 ranks (processes; rank 0 reports), in µs per
// call (median and mean of 5 repeats of `calls` calls; the stream is
// synchronised every 64 calls, not timed).  The staged path by default;
// TERN_STAGED_MAX_BYTES=0 measures the engine's device path.  The target is
// 5 µs a call.  (One rank would measure the one-rank copy: api/checks.h.)
// With --cuda (a build with CUDA, on a GPU) the buffers are cudaMalloc'ed
// and the stream a CUDA stream: the figure the target is about on a GPU.
//   build/perf/device_enqueue_cost [calls=2000] [--cuda]
#include <tern/tern.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#ifdef TERN_WITH_CUDA
#include <cuda_runtime.h>
#endif
#include <cstring>

#include "base/env.h"
#include "memory/simulated.h"
#include "memory/staged.h"

namespace sim = tern::sim;

// The buffer and stream the calls use: the simulated device's or CUDA's.
struct Stream {
  void* stream;
  void* buf;
  bool cuda;
  void sync() const {
#ifdef TERN_WITH_CUDA
    if (cuda) return void(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
#endif
    sim::synchronize(static_cast<sim::Stream*>(stream));
  }
};

Stream cudaStream() {
#ifdef TERN_WITH_CUDA
  cudaStream_t s = nullptr;
  void* buf = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess && cudaMalloc(&buf, 4096) == cudaSuccess)
    return Stream{s, buf, true};
#endif
  return Stream{nullptr, nullptr, true};
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 2000;
  const bool cuda = argc > 2 && !std::strcmp(argv[2], "--cuda");
  ternUniqueId id;
  ternComm_t comm;
  if (ternGetUniqueId(&id) != ternSuccess) return 1;
  const pid_t peer = fork();
  const int rank = peer == 0 ? 1 : 0;
  if (rank == 1) std::freopen("/dev/null", "w", stdout);  // rank 0 reports
  if (!cuda) sim::enable();  // after fork: its threads and mappings are this process's
  if (ternCommInitRank(&comm, 2, id, rank) != ternSuccess) {
    std::fprintf(stderr, "device_enqueue_cost: %s\n", ternGetLastError(nullptr));
    return 1;
  }
  Stream st = cuda ? cudaStream() : Stream{sim::newStream(), sim::alloc(4096), false};
  if (!st.stream || !st.buf) {
    std::fprintf(stderr, "device_enqueue_cost: no %s device\n", cuda ? "CUDA" : "simulated");
    return 1;
  }
  const size_t before = tern::stagedCalls();
  std::printf("# %s device, path: %s\n", cuda ? "CUDA" : "simulated", tern::envInt("TERN_STAGED_MAX_BYTES", 1) ? "staged" : "engine");
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<double> us(calls);
    for (int i = 0; i < calls; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (ternAllReduce(st.buf, st.buf, 1024, ternFloat32, ternSum, comm, reinterpret_cast<ternStream_t>(st.stream)) !=
          ternSuccess) {
        std::fprintf(stderr, "device_enqueue_cost: %s\n", ternGetLastError(comm));
        return 1;
      }
      us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (i % 64 == 63) st.sync();  // the engine keeps up: pools stay warm
    }
    st.sync();
    double mean = 0;
    for (double u : us) mean += u;
    std::nth_element(us.begin(), us.begin() + calls / 2, us.end());
    std::printf("%.2f us per call (median), %.2f mean\n", us[calls / 2], mean / calls);
  }
  std::printf("# %zu calls staged\n", tern::stagedCalls() - before);
  ternCommDestroy(comm);
  int status = 0;
  if (peer > 0) waitpid(peer, &status, 0);
  return status;
}
