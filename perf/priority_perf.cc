// priority_perf: does an urgent allreduce overtake a bulk one?
//
// Each rank times, with every rank starting together (barrier):
//   solo     an urgent allreduce (level 0) alone, and a bulk one (level 7) alone;
//   cold     the urgent one alone right after this rank swept the bulk buffer
//            (as the bulk allreduce does): its data and the fifos are out of
//            the caches, as they are in the contended run.  Over shared
//            memory this, not scheduling, is much of what contention costs;
//            the table gives the ratio to both.
//   contended  the bulk allreduce is issued first and, once it is well under
//              way (a quarter of its solo time later), the urgent one:
//              urgent time from its issue to its return, bulk time from its
//              issue to its completion.
// The bulk one runs either as an async request of the same thread
// (ternGroupEndAsync; --mode async) or as a blocking call on a second thread
// (--mode threads).  Prints one table row per mode; the targets (docs/DESIGN.md):
// urgent contended <= 1.2x its solo time, bulk loses < 10%.
//
// Every iteration measures all of them in turn (solo, cold, bulk solo, then
// each mode contended), and ratios and losses are the medians of each
// iteration's own ratio: on a shared VM memory bandwidth drifts by 3x over
// minutes, and a solo time taken at the start would not describe the end.
// The urgent ratios are also given at the 90th percentile: an urgent call
// that sometimes waits behind a bulk step is a tail that a median hides.
// --delay random issues the urgent call at a random point of the bulk one
// (10-90% of its solo time, the same on every rank: one seed) instead of
// always a quarter in, so the tail is sampled wherever the bulk one is.
//
// Before the timed iterations, -w contended runs of each mode go untimed:
// the first contended calls write deeper into the connections' staging
// fifos than any solo call did, and a fifo's pages are only faulted in when
// first written (src/transport/fifo.h), which made the first one to three
// calls over tcp 15-46 ms long, one time per connection (perf/RESULTS.md,
// 2026-12-05: the urgent caller returns before the bulk's driver wakes).
//
//   tools/ternrun -n 2 build/perf/priority_perf [-b 256M] [-u 4M] [-n 5] [-w 2] [--mode async|threads|both]
//                                               [--produce 0|1] [--delay quarter|random] [--calls 0|1]
//                                               [--slice-us N]
// --calls 1 prints each contended urgent call's time (stderr), to set beside
// the spans TERN_TRACE records (issue, start, end of the same operations).
//
// The last two columns are how far apart the ranks issued the urgent call
// (median, 90th percentile): each rank sleeps until the same moment, but a
// thread woken on a host whose cores are busy may run milliseconds late,
// and the other ranks' calls wait for it.  --slice-us N asks Linux (6.12+,
// EEVDF) for an N-microsecond time slice for the thread that issues the
// urgent call, as a latency-minded application would: a thread with a
// shorter slice than the running one takes the core when it wakes.  The
// bulk thread (--mode threads) keeps the default.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "tern/tern.h"

namespace {

using ternperf::now;

// The q-quantile of v (nearest rank): 0.5 the median, 0.9 the tail.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }

// The calling thread's EEVDF slice (sched_attr.sched_runtime, ns; 0: the
// default), policy SCHED_OTHER, nice 0.  glibc has no wrapper.
bool setSlice(uint64_t ns) {
  struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
  } a{};
  a.size = sizeof a;
  a.runtime = ns;
  return syscall(SYS_sched_setattr, 0, &a, 0) == 0;
}

void check(ternResult_t r, ternComm_t comm, const char* what) {
  if (r == ternSuccess) return;
  fprintf(stderr, "priority_perf: %s: %s\n", what, ternGetLastError(comm));
  exit(1);
}

struct Bench {
  ternComm_t comm;
  std::vector<float> bulk, urgent;

  // --produce 1: the urgent data is written right before each call (as a
  // gradient just computed is), so it starts in this core's caches.
  bool produce = false;
  bool sliced = false;  // --slice-us: the bulk thread resets its inherited slice
  double skew = 0;      // the last contended run: the ranks' urgent issues, latest - earliest

  double allreduce(std::vector<float>& x, int level) {
    ternSetPriority(level);
    if (produce && level == 0) std::fill(x.begin(), x.end(), 1.0f);
    double t = now();
    check(ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, ternSum, comm, nullptr), comm,
          "allreduce");
    return now() - t;
  }

  // Reads and writes every cache line of the bulk buffer.
  void sweepCaches() {
    for (size_t i = 0; i < bulk.size(); i += 16) bulk[i] += 0.0f;
  }

  // Median of n solo runs at `level` (`cold`: caches swept before each).
  double solo(std::vector<float>& x, int level, int n, bool cold = false) {
    std::vector<double> t;
    for (int i = 0; i < n; ++i) {
      if (cold) sweepCaches();
      check(ternBarrier(comm), comm, "barrier");
      t.push_back(allreduce(x, level));
    }
    return median(t);
  }

  // One contended run: returns {urgent seconds, bulk seconds}.
  std::pair<double, double> contended(bool threads, double delay) {
    check(ternBarrier(comm), comm, "barrier");
    double bulkStart = now(), bulkEnd = 0;
    ternRequest_t req = nullptr;
    std::thread th;
    if (threads) {
      th = std::thread([&] {
        if (sliced) setSlice(0);
        allreduce(bulk, 7);
        bulkEnd = now();
      });
    } else {
      ternSetPriority(7);
      ternGroupStart();
      ternAllReduce(bulk.data(), bulk.data(), bulk.size(), ternFloat32, ternSum, comm, nullptr);
      check(ternGroupEndAsync(&req), comm, "bulk request");
    }
    // Sleep, not spin: a caller that yield-spins here keeps a third and a
    // fourth runnable thread on a 2-core host, and the urgent call then
    // measures the scheduler's time slice, not the engine.
    std::this_thread::sleep_for(std::chrono::duration<double>(bulkStart + delay - now()));
    double issued = now();
    double u = allreduce(urgent, 0);
    if (threads) {
      th.join();
    } else {
      check(ternRequestWait(req), comm, "bulk wait");
      bulkEnd = now();
    }
    double span[2] = {issued, -issued};  // one host: steady_clock is the same clock in every rank
    check(ternAllReduce(span, span, 2, ternFloat64, ternMax, comm, nullptr), comm, "issue skew");
    skew = span[0] + span[1];
    return {u, bulkEnd - bulkStart};
  }
};

}  // namespace

int main(int argc, char** argv) {
  size_t bulkBytes = 256 << 20, urgentBytes = 4 << 20;
  int iters = 5, warmups = 2;
  Bench b;
  std::string mode = "both", delay = "quarter";
  bool calls = false;
  long long sliceUs = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-b") bulkBytes = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "-u") urgentBytes = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "-n") iters = atoi(argv[i + 1]);
    else if (a == "-w") warmups = atoi(argv[i + 1]);
    else if (a == "--mode") mode = argv[i + 1];
    else if (a == "--calls") calls = std::string(argv[i + 1]) == "1";
    else if (a == "--slice-us") sliceUs = atoll(argv[i + 1]);
    else if (a == "--produce") b.produce = atoi(argv[i + 1]) != 0;
    else if (a == "--delay" && (std::string(argv[i + 1]) == "quarter" || std::string(argv[i + 1]) == "random"))
      delay = argv[i + 1];
    else {
      fprintf(stderr,
              "usage: priority_perf [-b BULK] [-u URGENT] [-n ITERS] [-w WARMUPS] [--mode async|threads|both] "
              "[--produce 0|1] [--delay quarter|random] [--calls 0|1] [--slice-us N]\n");
      return 2;
    }
  }
  check(ternCommInitFromEnv(&b.comm), nullptr, "init");
  int rank, nranks;
  ternCommUserRank(b.comm, &rank);
  ternCommCount(b.comm, &nranks);
  if (sliceUs > 0 && !(b.sliced = setSlice(static_cast<uint64_t>(sliceUs) * 1000))) {
    fprintf(stderr, "priority_perf: --slice-us: sched_setattr refused (a kernel before 6.6 has no slices)\n");
    return 2;
  }
  b.bulk.assign(bulkBytes / 4, 1.0f);  // touched here, never on the timed path
  b.urgent.assign(urgentBytes / 4, 1.0f);
  b.allreduce(b.urgent, 0);  // warm-up: both levels' connections
  b.allreduce(b.bulk, 7);
  const char* modes[] = {"async", "threads"};
  std::vector<double> soloU, coldU, soloB, u[2], bt[2], ratio[2], toCold[2], loss[2], skew[2];
  double bulkSolo = b.solo(b.bulk, 7, 1);
  for (int w = 0; w < warmups; ++w)
    for (int m = 0; m < 2; ++m)
      if (mode == "both" || mode == modes[m]) b.contended(m == 1, bulkSolo * 0.5);
  std::mt19937 rng(12345);  // every rank draws the same delays
  std::uniform_real_distribution<double> at(0.1, 0.9);
  for (int i = 0; i < iters; ++i) {
    soloU.push_back(b.solo(b.urgent, 0, 3));
    coldU.push_back(b.solo(b.urgent, 0, 1, true));
    soloB.push_back(b.solo(b.bulk, 7, 1));
    for (int m = 0; m < 2; ++m) {
      if (mode != "both" && mode != modes[m]) continue;
      auto [tu, tb] = b.contended(m == 1, soloB.back() * (delay == "random" ? at(rng) : 0.25));
      u[m].push_back(tu);
      bt[m].push_back(tb);
      if (calls)  // each contended urgent call, to set beside TERN_TRACE's spans (issue, start, end)
        fprintf(stderr, "call rank %d mode %s: urgent %.3f ms\n", rank, modes[m], tu * 1e3);
      ratio[m].push_back(tu / soloU.back());
      toCold[m].push_back(tu / coldU.back());
      loss[m].push_back(tb / soloB.back() - 1);
      skew[m].push_back(b.skew);
    }
  }
  if (rank == 0) {
    printf("# priority_perf: %d ranks, transport to next: %s, bulk %zu MiB at level 7, urgent %zu MiB at level 0\n",
           nranks, ternCommPeerTransport(b.comm, (rank + 1) % nranks), bulkBytes >> 20, urgentBytes >> 20);
    printf("# urgent call issued %s of the bulk one's solo time in; ratios: median and 90th percentile of %d\n",
           delay == "random" ? "at random 10-90%" : "a quarter", iters);
    printf("# %-8s %10s %8s %10s %7s %7s %7s %7s %9s %10s %9s %8s %7s\n", "mode", "urgent(ms)", "cold",
           "contended", "ratio", "p90", "/cold", "p90", "bulk(ms)", "contended", "bulk loss", "skew(ms)", "p90");
  }
  for (int m = 0; m < 2; ++m) {
    if (u[m].empty() || rank != 0) continue;
    printf("  %-8s %10.2f %8.2f %10.2f %7.2f %7.2f %7.2f %7.2f %9.1f %10.1f %8.1f%% %8.2f %7.2f\n", modes[m],
           median(soloU) * 1e3, median(coldU) * 1e3, median(u[m]) * 1e3, median(ratio[m]),
           quantile(ratio[m], 0.9), median(toCold[m]), quantile(toCold[m], 0.9), median(soloB) * 1e3,
           median(bt[m]) * 1e3, median(loss[m]) * 100, median(skew[m]) * 1e3, quantile(skew[m], 0.9) * 1e3);
  }
  ternCommDestroy(b.comm);
  return 0;
}
