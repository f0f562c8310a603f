// cache_sweep: what a bulk transfer's memory sweep costs an urgent operation
// on one host, with no communication at all.
//
// An urgent 4 MiB allreduce that overtakes a 256 MiB one (priority_perf)
// finds its buffer and its fifos evicted: the bulk operation has streamed
// hundreds of MiB through the last-level cache just before.  This measures
// that effect alone: one pass (x += y) over two U-byte buffers, warm (right
// after the same pass) and right after a pass over two B-byte buffers, the
// sweep written with ordinary stores and with non-temporal ones (which do
// not allocate in the cache on write, so only the sweep's loads evict).
// If even non-temporal stores leave the urgent pass several times slower,
// no scheduling can make the contended urgent operation as fast as a warm
// solo one on this host: the difference is DRAM against cache.
//
//   build/perf/cache_sweep [-u 4M] [-b 256M] [-n 7]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "common.h"

namespace {

using ternperf::now;

void pass(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

// x += y with stores that bypass the cache (SSE2: every x86-64 has it).
void passStreaming(float* x, const float* y, size_t n) {
#if defined(__x86_64__)
  for (size_t i = 0; i + 4 <= n; i += 4) {
    __m128 v = _mm_add_ps(_mm_load_ps(x + i), _mm_load_ps(y + i));
    _mm_stream_ps(x + i, v);
  }
  _mm_sfence();
#else
  pass(x, y, n);
#endif
}

float* alloc(size_t floats, float v) {
  auto* p = static_cast<float*>(aligned_alloc(64, floats * sizeof(float)));
  if (!p) {
    fprintf(stderr, "cache_sweep: out of memory\n");
    exit(1);
  }
  std::fill(p, p + floats, v);  // touched here, never on the timed path
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  size_t u = 4 << 20, b = 256 << 20;
  int iters = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-u") u = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "-b") b = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "-n") iters = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: cache_sweep [-u URGENT] [-b BULK] [-n ITERS]\n");
      return 2;
    }
  }
  const size_t un = u / 4, bn = b / 4;
  float *ux = alloc(un, 1), *uy = alloc(un, 2), *bx = alloc(bn, 1), *by = alloc(bn, 2);
  printf("# cache_sweep: urgent pass over 2 x %zu MiB, bulk sweep over 2 x %zu MiB (min of %d)\n",
         u >> 20, b >> 20, iters);
  printf("# %-16s %12s %14s %8s %12s\n", "sweep", "warm(ms)", "after(ms)", "ratio", "sweep GB/s");
  struct Sweep {
    const char* name;
    void (*fn)(float*, const float*, size_t);
  };
  for (Sweep s : {Sweep{"none", nullptr}, Sweep{"ordinary", pass}, Sweep{"non-temporal", passStreaming}}) {
    double warm = 1e9, after = 1e9, sweep = 1e9;
    for (int i = 0; i < iters; ++i) {
      pass(ux, uy, un);
      double t0 = now();
      pass(ux, uy, un);
      double t1 = now();
      if (s.fn) s.fn(bx, by, bn);
      double t2 = now();
      pass(ux, uy, un);
      double t3 = now();
      warm = std::min(warm, t1 - t0);
      sweep = std::min(sweep, t2 - t1);
      after = std::min(after, t3 - t2);
    }
    printf("  %-16s %12.3f %14.3f %8.2f %12.1f\n", s.name, warm * 1e3, after * 1e3, after / warm,
           s.fn ? 3.0 * b / sweep / 1e9 : 0.0);
  }
  return 0;
}
