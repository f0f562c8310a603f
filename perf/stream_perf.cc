// stream_perf: what a weight stream delivers, alone and beside urgent work.
//
// Two ranks; rank 1 sends, rank 0 receives (and prints: perf/compare reads rank 0).  Per size (-b .. -e, x -f), every
// iteration times in turn (interleaved, so drift on a shared host hits all
// alike), from a barrier to the receiver having the data:
//   sendrecv  one ternSend/ternRecv of the size at the stream's level;
//   stream    one version pushed and waited for (snapshot copy, the move,
//             the receiver's copy out: the API's whole path).
// Then, once: an urgent 4 MiB allreduce (level 0, -u) alone and while the
// stream moves a version every --period ms at level 7 (a pusher thread on
// the sender, a waiter thread on the receiver): the urgent one's time ratio
// (target <= 1.2x) and what the stream delivered meanwhile.
// Medians over -n iterations, with min-max spread.
//
//   tools/ternrun -n 2 build/perf/stream_perf [-b 1M] [-e 64M] [-f 4] [-n 7] [-u 4M]
//                                             [--beside 16M] [--period 10]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "tern/tern.h"

namespace {

using ternperf::now;

constexpr int kSender = 1;  // rank 0 receives and prints

void check(ternResult_t r, ternComm_t comm, const char* what) {
  if (r == ternSuccess) return;
  fprintf(stderr, "stream_perf: %s: %s\n", what, ternGetLastError(comm));
  exit(1);
}

struct Spread {
  std::vector<double> v;
  double med() {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double lo() { return *std::min_element(v.begin(), v.end()); }
  double hi() { return *std::max_element(v.begin(), v.end()); }
};

struct Bench {
  ternComm_t comm;
  int rank;

  void barrier() { check(ternBarrier(comm), comm, "barrier"); }

  double sendrecv(std::vector<char>& buf) {
    ternSetPriority(7);
    barrier();
    double t = now();
    ternResult_t r = rank == kSender ? ternSend(buf.data(), buf.size(), ternUint8, 0, comm, nullptr)
                                     : ternRecv(buf.data(), buf.size(), ternUint8, 1, comm, nullptr);
    check(r, comm, "send/recv");
    return now() - t;
  }

  double stream(ternWeightStream_t ws, std::vector<char>& buf, long long v) {
    void* p = buf.data();
    barrier();
    double t = now();
    if (rank == kSender) {
      check(ternWeightStreamPush(ws, const_cast<const void* const*>(&p), v), comm, "push");
    } else {
      long long got = -1;
      check(ternWeightStreamWait(ws, &p, v, &got), comm, "wait");
    }
    return now() - t;
  }

  double urgent(std::vector<float>& x) {
    ternSetPriority(0);
    barrier();
    double t = now();
    check(ternAllReduce(x.data(), x.data(), x.size(), ternFloat32, ternSum, comm, nullptr), comm,
          "allreduce");
    return now() - t;
  }
};

ternWeightStream_t openStream(ternComm_t comm, int rank, size_t bytes) {
  ternDataType_t t = ternUint8;
  ternWeightStream_t ws;
  check(ternWeightStreamOpen(comm, 1 - rank, kSender, 1, &bytes, &t, 7, &ws), comm, "open");
  return ws;
}

void throughput(Bench& b, size_t lo, size_t hi, int factor, int iters) {
  if (b.rank != kSender) {
    printf("# %12s %10s %18s %10s %18s %8s\n", "bytes", "sr(ms)", "sr GB/s [min-max]", "ws(ms)",
           "ws GB/s [min-max]", "ws/sr");
  }
  long long version = 0;
  for (size_t bytes = lo; bytes <= hi; bytes *= factor) {
    std::vector<char> buf(bytes, 1);
    ternWeightStream_t ws = openStream(b.comm, b.rank, bytes);
    b.sendrecv(buf);  // warm-up: the level's connection, the stream's buffers
    b.stream(ws, buf, version++);
    Spread sr, st, ratio;
    for (int i = 0; i < iters; ++i) {
      sr.v.push_back(bytes / b.sendrecv(buf) / 1e9);
      st.v.push_back(bytes / b.stream(ws, buf, version++) / 1e9);
      ratio.v.push_back(st.v.back() / sr.v.back());
    }
    check(ternWeightStreamClose(ws), b.comm, "close");
    if (b.rank != kSender)
      printf("  %12zu %10.2f %7.2f [%.2f-%.2f] %10.2f %7.2f [%.2f-%.2f] %8.2f\n", bytes,
             bytes / sr.med() / 1e6, sr.med(), sr.lo(), sr.hi(), bytes / st.med() / 1e6, st.med(),
             st.lo(), st.hi(), ratio.med());
  }
}

// The stream moves a new version every `period` s while the urgent
// allreduce runs; returns what it delivered (bytes per second) meanwhile.
struct Background {
  std::atomic<bool> stop{false};
  std::atomic<long long> delivered{0};
  std::thread th;
  static constexpr long long kLast = 1LL << 50;

  void start(ternWeightStream_t ws, int rank, std::vector<char>& buf, double period, long long* v) {
    stop = false;
    delivered = 0;
    const long long base = *v;
    th = std::thread([=, &buf] {
      void* p = buf.data();
      if (rank == kSender) {
        long long k = base;
        while (!stop.load()) {
          ternWeightStreamPush(ws, const_cast<const void* const*>(&p), k++);
          std::this_thread::sleep_for(std::chrono::duration<double>(period));
        }
        ternWeightStreamPush(ws, const_cast<const void* const*>(&p), base + kLast);  // the end mark
      } else {
        long long got = base - 1;
        while (got < base + kLast) {
          if (ternWeightStreamWait(ws, &p, got + 1, &got) != ternSuccess) break;
          delivered += 1;
        }
      }
    });
  }
  long long finish(long long* v) {
    stop = true;
    th.join();
    *v += 2 * kLast;  // the next run's versions come after this one's end mark
    return delivered.load() - 1;  // the end mark moved no data of the run
  }
};

void beside(Bench& b, size_t urgentBytes, size_t streamBytes, double period, int iters) {
  std::vector<float> x(urgentBytes / 4, 1.0f);
  std::vector<char> buf(streamBytes, 1);
  ternWeightStream_t ws = openStream(b.comm, b.rank, streamBytes);
  long long v = 0;
  b.urgent(x);
  Spread solo, busy, ratio, rate;
  Background bg;
  for (int i = 0; i < iters; ++i) {
    std::vector<double> s, c;
    for (int k = 0; k < 3; ++k) s.push_back(b.urgent(x));
    bg.start(ws, b.rank, buf, period, &v);
    double t0 = now();
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * period));  // the stream is moving
    for (int k = 0; k < 3; ++k) c.push_back(b.urgent(x));
    b.barrier();
    long long n = bg.finish(&v);
    double secs = now() - t0;
    std::sort(s.begin(), s.end());
    std::sort(c.begin(), c.end());
    solo.v.push_back(s[1]);
    busy.v.push_back(c[1]);
    ratio.v.push_back(c[1] / s[1]);
    rate.v.push_back(n * double(streamBytes) / secs / 1e9);
  }
  check(ternWeightStreamClose(ws), b.comm, "close");
  if (b.rank != kSender) {
    printf("# urgent %zu MiB allreduce (level 0) beside a %zu MiB weight stream (level 7), a version every %.0f ms\n",
           urgentBytes >> 20, streamBytes >> 20, period * 1e3);
    printf("# %10s %12s %18s %22s\n", "solo(ms)", "beside(ms)", "ratio [min-max]", "stream GB/s [min-max]");
    printf("  %10.2f %12.2f %7.2f [%.2f-%.2f] %10.2f [%.2f-%.2f]\n", solo.med() * 1e3,
           busy.med() * 1e3, ratio.med(), ratio.lo(), ratio.hi(), rate.med(), rate.lo(), rate.hi());
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t lo = 1 << 20, hi = 64 << 20, urgentBytes = 4 << 20, besideBytes = 16 << 20;
  int factor = 4, iters = 7;
  double period = 0.010;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-b") lo = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "-e") hi = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "-f") factor = std::max(2, atoi(argv[i + 1]));
    else if (a == "-n") iters = std::max(1, atoi(argv[i + 1]));
    else if (a == "-u") urgentBytes = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "--beside") besideBytes = ternperf::parseSize(argv[i + 1], argv[0]);
    else if (a == "--period") period = atof(argv[i + 1]) / 1e3;
    else {
      fprintf(stderr, "usage: stream_perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-u URGENT] "
                      "[--beside BYTES] [--period MS]\n");
      return 2;
    }
  }
  Bench b;
  check(ternCommInitFromEnv(&b.comm), nullptr, "init");
  int nranks;
  ternCommUserRank(b.comm, &b.rank);
  ternCommCount(b.comm, &nranks);
  if (nranks != 2) {
    fprintf(stderr, "stream_perf: run it with 2 ranks (got %d)\n", nranks);
    return 2;
  }
  if (b.rank != kSender)
    printf("# stream_perf: transport %s, %d iterations, medians; sr = send/recv, ws = weight stream\n",
           ternCommPeerTransport(b.comm, 1), iters);
  throughput(b, lo, hi, factor, iters);
  beside(b, urgentBytes, besideBytes, period, iters);
  ternCommDestroy(b.comm);
  return 0;
}
