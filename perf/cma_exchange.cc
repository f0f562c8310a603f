// cma_exchange: the peers' way of a 2-rank send/recv over shared memory, with
// no library in the way.  Two processes each read the other's buffer with one
// process_vm_readv per message (single copy, as OpenMPI's vader and MPICH do
// with CMA), at the same time, as both ranks of a send/recv or a 2-rank
// allgather do.  Each size runs twice:
//   unchanged  nothing writes the source between exchanges (nccl-tests' loop):
//              from the second exchange on, the reader may find the source
//              in its own cache, however far its core is from the writer's;
//   written    each process writes its source just before each exchange, as
//              a training step writes its gradients: the reader then pulls
//              lines the other core has just written.
// Best of -n exchanges; GB/s per direction.  Compare with `sendrecv_perf -W 0|1`
// (perf/harness/common.cc) and read the host's phase with core_pingpong.
//
//   build/perf/cma_exchange [-n 30]
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common.h"

namespace {

using ternperf::now;

// What the two processes share: where each one's source is, and two
// counters each to line up an exchange's start and end.
struct Shared {
  std::atomic<long> ready[2], done[2];
  char* src[2];
  pid_t pid[2];
};

void waitFor(const std::atomic<long>& v, long at) {
  while (v.load(std::memory_order_acquire) < at) {
  }
}

// One exchange: both read the other's source into their own destination.
// Seconds from this side's start to both sides' end.
double exchange(Shared* sh, int me, char* dst, size_t bytes, long round) {
  sh->ready[me].store(round, std::memory_order_release);
  waitFor(sh->ready[1 - me], round);
  double t = now();
  iovec local{dst, bytes}, remote{sh->src[1 - me], bytes};
  if (process_vm_readv(sh->pid[1 - me], &local, 1, &remote, 1, 0) != static_cast<ssize_t>(bytes)) {
    perror("process_vm_readv");
    exit(1);
  }
  sh->done[me].store(round, std::memory_order_release);
  waitFor(sh->done[1 - me], round);
  return now() - t;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "-n")) reps = std::max(1, atoi(argv[i + 1]));
  const size_t maxBytes = 16 << 20;
  auto* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) return perror("mmap"), 1;
  new (sh) Shared{};
  pid_t child = fork();
  if (child < 0) return perror("fork"), 1;
  const int me = child == 0 ? 1 : 0;
  char* src = static_cast<char*>(aligned_alloc(4096, maxBytes));
  char* dst = static_cast<char*>(aligned_alloc(4096, maxBytes));
  memset(src, me + 1, maxBytes);
  memset(dst, 0, maxBytes);
  sh->src[me] = src;
  sh->pid[me] = getpid();
  long round = 0;
  // The first exchange publishes both sources (their addresses are set before it).
  exchange(sh, me, dst, 64, ++round);
  if (me == 0)
    printf("# GB/s per direction, best of %d\n%10s %10s %10s\n", reps, "bytes", "unchanged", "written");
  for (size_t bytes = 256 << 10; bytes <= maxBytes; bytes *= 4) {
    double best[2] = {1e30, 1e30};
    for (int written = 0; written < 2; ++written)
      for (int k = 0; k < reps; ++k) {
        if (written) memset(src, static_cast<int>(k + me), bytes);
        best[written] = std::min(best[written], exchange(sh, me, dst, bytes, ++round));
      }
    if (me == 0) printf("%10zu %10.2f %10.2f\n", bytes, bytes / best[0] / 1e9, bytes / best[1] / 1e9);
  }
  if (me == 1) _exit(0);
  waitpid(child, nullptr, 0);
  return 0;
}
