// The host's floor for a small operation between two processes: one cache
// line each way.  Two processes ping-pong a counter on two lines of a shared
// page (each spins with pause), page after page, and print the one-way time
// per page in ns.  On this project's VM it reads ~52 ns or ~220 ns, the same
// on every page of a moment and flipping every few hundred ms (the host
// moving the vCPUs): what tern's per-launch slow mode rides on
// (perf/RESULTS.md, 2026-12-02: the small path a third cheaper, and the slow
// mode traced to the VM).
//   chrt -f 1 build/perf/core_pingpong [pages=16] [round_trips=200000]
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {

struct alignas(64) Line {
  std::atomic<uint64_t> v{0};
};

// The one-way time of `n` round trips between this process and a child on
// lines a (ours to write) and b (the child's).
double oneWayNs(Line* a, Line* b, long n) {
  a->v = 0, b->v = 0;
  const pid_t pid = fork();
  if (pid == 0) {
    for (long i = 1; i <= n; ++i) {
      while (a->v.load(std::memory_order_acquire) != static_cast<uint64_t>(i)) _mm_pause();
      b->v.store(i, std::memory_order_release);
    }
    _exit(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 1; i <= n; ++i) {
    a->v.store(i, std::memory_order_release);
    while (b->v.load(std::memory_order_acquire) != static_cast<uint64_t>(i)) _mm_pause();
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  int status;
  waitpid(pid, &status, 0);
  return ns / n / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int pages = argc > 1 ? atoi(argv[1]) : 16;
  const long n = argc > 2 ? atol(argv[2]) : 200000;
  if (pages <= 0 || n <= 0) {
    fprintf(stderr, "usage: core_pingpong [pages > 0] [round_trips > 0]\n");
    return 2;
  }
  void* m = mmap(nullptr, 4096UL * pages, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (m == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  for (int p = 0; p < pages; ++p) {
    char* page = static_cast<char*>(m) + 4096L * p;
    printf("%.0f ", oneWayNs(new (page) Line, new (page + 128) Line, n));
    fflush(stdout);
  }
  printf("\n");
  return 0;
}
