// copy_paths: what one byte of a large shm transfer costs by each way of
// moving it, on this host, with no library in the way.  Decides whether
// single copy (CMA, as OpenMPI's vader uses it) or non-temporal stores could
// make tern's all-to-all faster than its fifo path:
//   cma       the receiver reads the sender's buffer with process_vm_readv
//             (one copy, but the kernel pins the peer's pages as it goes),
//             in slices of `-c` bytes;
//   fifo      the sender copies into a 4 MiB ring, the receiver out of it
//             (two memcpys, the ring stays in cache), both on one core here;
//   fifo+nt   the same with non-temporal stores for the copy out of the ring
//             (no read-for-ownership of the destination).
// Best of -n passes; GB/s of payload.
//
//   build/perf/copy_paths [-c 256K] [-n 10]
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"

namespace {

using ternperf::now;

constexpr size_t kRing = 4 << 20;

#if defined(__x86_64__)
__attribute__((target("avx2"))) void ntCopy(char* d, const char* s, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n && (reinterpret_cast<uintptr_t>(d + i) & 31); ++i) d[i] = s[i];
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  for (; i < n; ++i) d[i] = s[i];
  _mm_sfence();
}
bool haveNt() { return __builtin_cpu_supports("avx2"); }
#else
void ntCopy(char* d, const char* s, size_t n) { memcpy(d, s, n); }
bool haveNt() { return false; }
#endif

// One pass of each way over `total` bytes; seconds.
double cmaPass(pid_t peer, const char* src, char* dst, size_t total, size_t slice) {
  double t = now();
  for (size_t o = 0; o < total; o += slice) {
    size_t n = std::min(slice, total - o);
    iovec l{dst + o, n}, r{const_cast<char*>(src) + o, n};
    if (process_vm_readv(peer, &l, 1, &r, 1, 0) != static_cast<ssize_t>(n)) return -1;
  }
  return now() - t;
}

double fifoPass(const char* src, char* ring, char* dst, size_t total, size_t slice, bool nt) {
  double t = now();
  for (size_t o = 0; o < total; o += slice) {
    size_t n = std::min(slice, total - o), at = o % kRing;
    memcpy(ring + at, src + o, n);
    if (nt) ntCopy(dst + o, ring + at, n);
    else memcpy(dst + o, ring + at, n);
  }
  return now() - t;
}

}  // namespace

int main(int argc, char** argv) {
  size_t slice = 256 << 10;
  int passes = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-c")) slice = ternperf::parseSize(argv[i + 1], "copy_paths");
    else if (!strcmp(argv[i], "-n")) passes = atoi(argv[i + 1]);
  }
  slice = std::min(slice, kRing);
  const size_t maxTotal = 64 << 20;
  char* src = static_cast<char*>(aligned_alloc(64, maxTotal));
  memset(src, 1, maxTotal);  // the child shares these pages (copy on write, never written)
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  char* dst = static_cast<char*>(aligned_alloc(64, maxTotal));
  char* ring = static_cast<char*>(aligned_alloc(64, kRing));
  memset(dst, 0, maxTotal);
  memset(ring, 0, kRing);
  printf("# slice %zu bytes, best of %d; GB/s\n%10s %10s %10s %10s\n", slice, passes, "bytes", "cma",
         "fifo", "fifo+nt");
  for (size_t total = 64 << 10; total <= maxTotal; total *= 4) {
    double best[3] = {1e30, 1e30, 1e30};
    for (int k = 0; k < passes; ++k) {
      double c = cmaPass(child, src, dst, total, slice);
      if (c < 0) {
        perror("process_vm_readv");
        kill(child, SIGKILL);
        return 1;
      }
      best[0] = std::min(best[0], c);
      best[1] = std::min(best[1], fifoPass(src, ring, dst, total, slice, false));
      if (haveNt()) best[2] = std::min(best[2], fifoPass(src, ring, dst, total, slice, true));
    }
    printf("%10zu %10.2f %10.2f %10s\n", total, total / best[0] / 1e9, total / best[1] / 1e9,
           haveNt() ? std::to_string(total / best[2] / 1e9).substr(0, 5).c_str() : "-");
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return 0;
}
