// The fixed cost of entering the API: a loop of ternCommCount on a 1-rank
// communicator (the call slot, the liveness check, the argument checks; no
// communication), in ns per call, five repeats.  The floor under every
// call's latency; an asymmetric fence took a full fence off it (0.69-0.93x
// the time, 3-5 ns a call; perf/RESULTS.md, 2026-12-02: small-path latency
// against the tuned OpenMPI, and why the one-way collectives lose).
//   build/perf/call_cost [calls=10000000]
#include <tern/tern.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 10000000;
  ternUniqueId id;
  ternComm_t comm;
  if (ternGetUniqueId(&id) != ternSuccess || ternCommInitRank(&comm, 1, id, 0) != ternSuccess) {
    std::fprintf(stderr, "call_cost: %s\n", ternGetLastError(nullptr));
    return 1;
  }
  long sum = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) {
      int n = 0;
      ternCommCount(comm, &n);
      sum += n;
    }
    std::chrono::duration<double, std::nano> t = std::chrono::steady_clock::now() - t0;
    std::printf("%.2f ns per call\n", t.count() / static_cast<double>(calls));
  }
  ternCommDestroy(comm);
  return sum == 5 * calls ? 0 : 1;  // every call answered 1 rank
}
