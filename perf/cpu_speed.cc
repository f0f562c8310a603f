// cpu_speed: how fast each CPU this process may use runs a fixed integer
// loop now, in ns per 1,000 rounds, one line per CPU (best of 5), then the
// slowest over the fastest.  On this project's 2-vCPU
// VM one vCPU runs CPU-bound code up to 1.5x slower than the other for
// stretches of a minute or so (presumably a neighbour on its physical core),
// and a run of small one-way collectives goes at the pace of the vCPU its
// root lands on (perf/RESULTS.md, "2026-12-06: send buffers written before
// each call, and what moves the 8-byte broadcast's rounds").
// perf/compare prints the gap beside each round's core_pingpong reading.
//   build/perf/cpu_speed
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

// ns per 1,000 rounds of eight independent add-xor-rotate chains: many
// instructions a cycle, as a library's call path runs, so a core shared
// with a busy neighbour shows here even where one dependent chain would not.
double chainNs() {
  constexpr int kRounds = 1000000;
  uint64_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) {
    for (uint64_t& v : x) v = ((v << 7) | (v >> 57)) ^ (v + 0x9e3779b97f4a7c15ull);
    asm volatile(""
                 : "+r"(x[0]), "+r"(x[1]), "+r"(x[2]), "+r"(x[3]), "+r"(x[4]), "+r"(x[5]), "+r"(x[6]),
                   "+r"(x[7]));
  }
  std::chrono::duration<double, std::nano> t = std::chrono::steady_clock::now() - t0;
  return t.count() * 1000.0 / kRounds;
}

}  // namespace

int main() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return perror("sched_getaffinity"), 1;
  std::vector<double> best;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) continue;
    double b = 1e30;
    for (int rep = 0; rep < 5; ++rep) b = std::min(b, chainNs());
    printf("cpu %d %.1f\n", cpu, b);
    best.push_back(b);
  }
  sched_setaffinity(0, sizeof allowed, &allowed);
  if (best.empty()) return 1;
  printf("gap %.2f\n",
         *std::max_element(best.begin(), best.end()) / *std::min_element(best.begin(), best.end()));
  return 0;
}
