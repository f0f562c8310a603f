// planner_perf [CANDIDATES]: how fast the kFkB planner simulates candidates.
//
// The model: batch 4096 on 16 stages of uneven speed, 10 Gbit/s links, memory
// for every K, so the planner's search covers all 8191 (m, K) pairs.  Prints
// the time for CANDIDATES (default 10,000) (m, K) pairs drawn uniformly from
// that space, on one thread and on all CPUs, then one whole plan().
// Target (issue 12): 10,000 candidates in <= 1 s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "planner/schedule.h"

using namespace tern::planner;

namespace {

PipelineModel model() {
  PipelineModel m;
  m.batchSize = 4096;
  for (int s = 0; s < 16; ++s) {
    Stage st;
    st.fwdMsPerSample = 0.010 + 0.002 * (s % 5);  // uneven stages: the choice of K matters
    st.bwdMsPerSample = 0.020 + 0.003 * (s % 3);
    st.activationBytesPerSample = st.outputBytesPerSample = 256 * 1024;
    st.staticBytes = 2e9;
    st.memoryBytes = 1e15;
    m.stages.push_back(st);
  }
  m.links.assign(15, Link{10.0, 20.0});
  return m;
}

double seconds(const std::chrono::steady_clock::time_point& since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  const long count = argc > 1 ? std::atol(argv[1]) : 10000;
  if (count <= 0) {
    std::fprintf(stderr, "usage: planner_perf [CANDIDATES > 0]\n");
    return 2;
  }
  const PipelineModel m = model();
  std::vector<MicroK> space;
  for (int64_t mb : divisors(m.batchSize))
    for (int64_t k = 1; k <= mb; ++k) space.push_back({mb, k});
  std::mt19937_64 rng(1);
  std::vector<MicroK> work;
  for (long i = 0; i < count; ++i) work.push_back(space[rng() % space.size()]);

  std::printf("# planner_perf: batch %lld, %zu stages, %zu (m, K) pairs in the search space\n",
              static_cast<long long>(m.batchSize), m.stages.size(), space.size());
  std::printf("# %10s %8s %10s %14s\n", "candidates", "threads", "time_s", "us/candidate");
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned threads : {1u, cpus}) {
    auto t0 = std::chrono::steady_clock::now();
    simulateAll(m, work, threads);
    const double t = seconds(t0);
    std::printf("  %10ld %8u %10.3f %14.1f\n", count, threads, t, t / count * 1e6);
    if (cpus == 1) break;
  }
  auto t0 = std::chrono::steady_clock::now();
  Plan p = plan(m);
  const Candidate& best = p.candidates[p.best];
  std::printf("# plan(): all %zu pairs on %u threads in %.3f s; best m = %lld, K = %lld, %.3f ms\n", space.size(),
              cpus, seconds(t0), static_cast<long long>(best.microbatches), static_cast<long long>(best.k),
              best.iterationMs);
  return 0;
}
