// The host cost of enqueuing one collective on device buffers, on the
// simulated device (CI has no GPU): the caller's time inside ternAllReduce
// on a stream, 1024 floats, 2 ranks (processes; rank 0 reports), in µs per
// call (median and mean of 5 repeats of `calls` calls; the stream is
// synchronised every 64 calls, not timed).  The staged path by default;
// TERN_STAGED_MAX_BYTES=0 measures the engine's device path.  The target is
// 5 µs a call.  (One rank would measure the one-rank copy: api/checks.h.)
//   build/perf/device_enqueue_cost [calls=2000]
#include <tern/tern.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "base/env.h"
#include "memory/simulated.h"
#include "memory/staged.h"

namespace sim = tern::sim;

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 2000;
  ternUniqueId id;
  ternComm_t comm;
  if (ternGetUniqueId(&id) != ternSuccess) return 1;
  const pid_t peer = fork();
  const int rank = peer == 0 ? 1 : 0;
  if (rank == 1) std::freopen("/dev/null", "w", stdout);  // rank 0 reports
  sim::enable();  // after fork: its threads and mappings are this process's
  if (ternCommInitRank(&comm, 2, id, rank) != ternSuccess) {
    std::fprintf(stderr, "device_enqueue_cost: %s\n", ternGetLastError(nullptr));
    return 1;
  }
  sim::Stream* s = sim::newStream();
  void* buf = sim::alloc(4096);
  const size_t before = tern::stagedCalls();
  std::printf("# path: %s\n", tern::envInt("TERN_STAGED_MAX_BYTES", 1) ? "staged" : "engine");
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<double> us(calls);
    for (int i = 0; i < calls; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (ternAllReduce(buf, buf, 1024, ternFloat32, ternSum, comm, reinterpret_cast<ternStream_t>(s)) !=
          ternSuccess) {
        std::fprintf(stderr, "device_enqueue_cost: %s\n", ternGetLastError(comm));
        return 1;
      }
      us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (i % 64 == 63) sim::synchronize(s);  // the engine keeps up: pools stay warm
    }
    sim::synchronize(s);
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
