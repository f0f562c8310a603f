#include "common.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "values.h"

namespace ternperf {

namespace {

struct Options {
  size_t minBytes = 32 << 20, maxBytes = 32 << 20, stepBytes = 1 << 20;
  double stepFactor = 1;
  int iters = 20, warmup = 5, check = 1, root = 0, average = 1, ternary = 0, registered = 0, written = 0;
  std::vector<ternDataType_t> types{ternFloat32};
  std::vector<ternRedOp_t> ops{ternSum};
};

[[noreturn]] void usage(const char* prog, const char* why) {
  if (why) fprintf(stderr, "%s: %s\n", prog, why);
  fprintf(stderr,
          "usage: %s [-b minbytes] [-e maxbytes] [-i stepbytes | -f stepfactor] [-n iters]\n"
          "       [-w warmup] [-c 0|1] [-d type|all] [-o sum|prod|max|min|avg|all] [-r root]\n"
          "       [-a 0|1|2|3 (time of rank 0|avg|min|max)] [-t 1] [-g 1]\n"
          "       [-T 1 (ternary-compressed allreduce: float/half/bfloat16, sum/avg)]\n"
          "       [-R 1 (buffers from the library's allocator: ternMemAlloc, MPI_Alloc_mem)]\n"
          "       [-W 1 (the send buffer written before each call, as a training step writes its\n"
          "              gradients; a barrier after it; only the calls timed)]\n",
          prog);
  exit(2);
}


Options parse(int argc, char** argv) {
  Options o;
  bool factorGiven = false;
  int c;
  while ((c = getopt(argc, argv, "b:e:i:f:n:w:c:d:o:r:a:t:g:T:R:W:h")) != -1) {
    switch (c) {
      case 'b': o.minBytes = parseSize(optarg, argv[0]); break;
      case 'e': o.maxBytes = parseSize(optarg, argv[0]); break;
      case 'i': o.stepBytes = parseSize(optarg, argv[0]); break;
      case 'f': o.stepFactor = atof(optarg); factorGiven = true; break;
      case 'n': o.iters = atoi(optarg); break;
      case 'w': o.warmup = atoi(optarg); break;
      case 'c': o.check = atoi(optarg); break;
      case 'r': o.root = atoi(optarg); break;
      case 'a': o.average = atoi(optarg); break;
      case 'T': o.ternary = atoi(optarg); break;
      case 'R':
        o.registered = atoi(optarg);
        break;
      case 'W':
        o.written = atoi(optarg);
        break;
      case 't': case 'g':
        if (atoi(optarg) != 1) usage(argv[0], "one thread and one device per process");
        break;
      case 'd': {
        o.types.clear();
        for (int t = 0; t < ternNumTypes; ++t)
          if (!strcmp(optarg, "all") || !strcmp(optarg, typeName(static_cast<ternDataType_t>(t))))
            o.types.push_back(static_cast<ternDataType_t>(t));
        if (o.types.empty()) usage(argv[0], "unknown datatype");
        break;
      }
      case 'o': {
        o.ops.clear();
        for (int t = 0; t < ternNumOps; ++t)
          if (!strcmp(optarg, "all") || !strcmp(optarg, opName(static_cast<ternRedOp_t>(t))))
            o.ops.push_back(static_cast<ternRedOp_t>(t));
        if (o.ops.empty()) usage(argv[0], "unknown op");
        break;
      }
      default: usage(argv[0], nullptr);
    }
  }
  if (!factorGiven) o.stepFactor = 1;
  if (o.iters < 1 || o.minBytes > o.maxBytes || o.average < 0 || o.average > 3)
    usage(argv[0], "bad arguments");
  if (o.stepFactor <= 1 && o.stepBytes == 0) usage(argv[0], "step must be positive");
  return o;
}

class TernBackend : public Backend {
 public:
  TernBackend() {
    if (ternCommInitFromEnv(&comm_) != ternSuccess) {
      fprintf(stderr, "ternCommInitFromEnv failed: %s\n", ternGetLastError(nullptr));
      exit(1);
    }
    ternCommUserRank(comm_, &rank_);
    ternCommCount(comm_, &size_);
  }
  ~TernBackend() override { ternCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override {
    return ternCommPeerTransport(comm_, (rank_ + 1) % size_);
  }
  bool allReduce(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op) override {
    return ternAllReduce(s, r, n, dt, op, comm_, nullptr) == ternSuccess;
  }
  bool allToAll(const void* s, void* r, size_t n, ternDataType_t dt) override {
    return ternAllToAll(s, r, n, dt, comm_, nullptr) == ternSuccess;
  }
  bool allGather(const void* s, void* r, size_t n, ternDataType_t dt) override {
    return ternAllGather(s, r, n, dt, comm_, nullptr) == ternSuccess;
  }
  bool reduceScatter(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op) override {
    return ternReduceScatter(s, r, n, dt, op, comm_, nullptr) == ternSuccess;
  }
  bool broadcast(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    return ternBroadcast(s, r, n, dt, root, comm_, nullptr) == ternSuccess;
  }
  bool reduce(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op, int root) override {
    return ternReduce(s, r, n, dt, op, root, comm_, nullptr) == ternSuccess;
  }
  bool gather(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    return ternGather(s, r, n, dt, root, comm_, nullptr) == ternSuccess;
  }
  bool scatter(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    return ternScatter(s, r, n, dt, root, comm_, nullptr) == ternSuccess;
  }
  // In place (s == r) a send and a receive on one buffer race: the receive
  // may overwrite bytes not yet sent (seen as #wrong at 64 MiB, beyond the
  // fifo).  Like MPI_Sendrecv_replace, the MPI peers' call there, the
  // outgoing block is copied aside first; the copy is timed, as theirs is.
  bool sendRecv(const void* s, void* r, size_t n, ternDataType_t dt) override {
    if (s == r) {
      aside_.resize(n * ternTypeSize(dt));
      memcpy(aside_.data(), s, aside_.size());
      s = aside_.data();
    }
    ternGroupStart();
    ternResult_t a = ternSend(s, n, dt, (rank_ + 1) % size_, comm_, nullptr);
    ternResult_t b = ternRecv(r, n, dt, (rank_ + size_ - 1) % size_, comm_, nullptr);
    ternResult_t e = ternGroupEnd();
    return a == ternSuccess && b == ternSuccess && e == ternSuccess;
  }
  bool barrier() override { return ternBarrier(comm_) == ternSuccess; }
  const char* lastError() const override { return ternGetLastError(comm_); }
  ternComm_t tern() override { return comm_; }
  void* allocComm(size_t bytes) override {
    void* p = nullptr;
    return ternMemAlloc(&p, bytes) == ternSuccess ? p : nullptr;
  }

 private:
  ternComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::vector<char> aside_;  // sendRecv in place: the outgoing block
};

#define PERF_CHECK(b, ok)                                                             \
  do {                                                                               \
    if (!(ok)) {                                                                     \
      fprintf(stderr, "%s:%d %s failed: %s\n", __FILE__, __LINE__, #ok, (b).lastError()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

void* prefaulted(size_t bytes) {
  void* p = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  return p;
}

// A benchmark buffer: the backend's own memory with -R 1 (touched here, as
// prefaulted's pages are), else plain prefaulted pages.
void* buffer(Backend& b, int registered, size_t bytes) {
  void* p = registered ? b.allocComm(bytes) : nullptr;
  if (registered && !p && b.rank() == 0) printf("# -R 1: %s has no allocator of its own\n", b.transport());
  if (!p) return prefaulted(bytes);
  memset(p, 0, bytes);
  return p;
}

double across(Backend& b, double v, ternRedOp_t op) {
  PERF_CHECK(b, b.allReduce(&v, &v, 1, ternFloat64, op));
  return v;
}

// Combines per-rank times as -a asks: 0 rank 0's, 1 average, 2 min, 3 max.
double combineTime(Backend& b, double sec, int how) {
  static const ternRedOp_t ops[] = {ternSum, ternSum, ternMin, ternMax};
  double all = across(b, sec, ops[how]);
  if (how == 1) all /= b.size();
  return how == 0 ? sec : all;  // every rank joins the allreduce either way
}

// One line per rank, gathered with a sum-allreduce so any backend can do it.
void printDevices(Backend& b) {
  const size_t kRec = 96;
  std::vector<char> all(kRec * b.size(), 0);
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  snprintf(&all[kRec * b.rank()], kRec,
           "#  Rank %2d Group  0 Pid %6d on %10s device  -1 [host] cpu, transport to next: %s",
           b.rank(), (int)getpid(), host, b.transport());
  PERF_CHECK(b, b.allReduce(all.data(), all.data(), all.size(), ternUint8, ternSum));
  if (b.rank() == 0) {
    printf("#\n# Using devices\n");
    for (int r = 0; r < b.size(); ++r) printf("%s\n", &all[kRec * r]);
  }
}

}  // namespace

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t parseSize(const char* s, const char* prog) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'G': case 'g': v *= 1 << 30; break;
    case 'M': case 'm': v *= 1 << 20; break;
    case 'K': case 'k': v *= 1 << 10; break;
    case '\0': break;
    default: usage(prog, "bad size");
  }
  return static_cast<size_t>(v);
}

// Wire bytes per call of the ternary allreduce and the dense ring's, from
// the communicator's counters around a timed loop.
struct WireMeter {
  ternTernaryStats_t before{};
  void start(Backend& b) { ternCommGetTernaryStats(b.tern(), &before); }
  void stop(Backend& b, int iters, double* wire, double* dense) {
    ternTernaryStats_t after{};
    ternCommGetTernaryStats(b.tern(), &after);
    *wire = static_cast<double>(after.wireBytes - before.wireBytes) / iters;
    *dense = static_cast<double>(after.denseBytes - before.denseBytes) / iters;
  }
};

// The timed loop's seconds per call.  nccl-tests' way (-W 0) calls back to
// back on buffers nothing writes between calls, so a peer that reads the
// sender's buffer in place (single copy) finds it in its own cache from the
// second call on, however far apart the cores are.  A training step writes
// its gradients before each collective: -W 1 fills the send buffer and
// writes those bytes again (from a copy) before each call, lines the ranks
// up with a barrier, and times the calls alone.  The last call's result is
// then checked as the first one's was (*wrong), which a call that read
// stale or unwritten input would fail.
double timedLoop(Backend& b, const CollTest& t, const Options& o, const char* send, char* recv,
                 const Sizes& s, ternDataType_t dt, ternRedOp_t op, double* wrong) {
  if (!o.written) {
    double t0 = now();
    for (int i = 0; i < o.iters; ++i) PERF_CHECK(b, t.run(b, send, recv, s.count, dt, op, o.root));
    return (now() - t0) / o.iters;
  }
  const int rank = b.rank(), nranks = b.size();
  t.fill(const_cast<char*>(send), s, dt, op, o.root, rank, nranks);
  const size_t bytes = s.sendElems * ternTypeSize(dt);
  std::vector<char> copy(send, send + bytes);
  double sec = 0;
  for (int i = 0; i < o.iters; ++i) {
    memcpy(const_cast<char*>(send), copy.data(), bytes);
    PERF_CHECK(b, b.barrier());
    double t0 = now();
    PERF_CHECK(b, t.run(b, send, recv, s.count, dt, op, o.root));
    sec += now() - t0;
  }
  if (o.check)
    *wrong += across(b, static_cast<double>(t.check(recv, s, dt, op, o.root, rank, nranks)), ternSum);
  return sec / o.iters;
}

int perfMain(int argc, char** argv, const CollTest& test, Backend* backend) {
  Options o = parse(argc, argv);
  if (o.ternary && !test.ternary) usage(argv[0], "-T 1: this collective has no ternary variant");
  if (o.ternary) {  // keep what ternary supports ("-d all" / "-o all" included)
    auto& ty = o.types;
    ty.erase(std::remove_if(ty.begin(), ty.end(), [](ternDataType_t d) {
               return d != ternFloat32 && d != ternFloat16 && d != ternBfloat16;
             }), ty.end());
    auto& op = o.ops;
    op.erase(std::remove_if(op.begin(), op.end(),
                            [](ternRedOp_t x) { return x != ternSum && x != ternAvg; }), op.end());
    if (ty.empty() || op.empty()) usage(argv[0], "-T 1 takes -d float|half|bfloat16 and -o sum|avg");
  }
  const CollTest& t = o.ternary ? *test.ternary : test;
  std::unique_ptr<Backend> own;
  if (!backend) own.reset(backend = new TernBackend());
  Backend& b = *backend;
  const int rank = b.rank(), nranks = b.size();
  if (t.hasRoot && (o.root < 0 || o.root >= nranks)) usage(argv[0], "root out of range");
  if (rank == 0) {
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d "
           "agg iters: 1 validation: %d graph: 0\n",
           o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : (double)o.stepBytes,
           o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check);
    if (o.written) printf("# -W 1: each call's send buffer written just before it; the calls alone timed\n");
  }
  printDevices(b);

  // One allocation of the largest buffers, pre-faulted, reused for every size.
  // In place, both sides live in recvbuf (scatter's root sends from it), so
  // it holds the larger of the two.
  Sizes big = t.sizes(o.maxBytes, 8, nranks, rank);
  size_t sendBytes = big.sendElems * 8 + 64;
  size_t recvBytes = std::max(big.sendElems, big.recvElems) * 8 + 64;
  void* sendbuf = buffer(b, o.registered, sendBytes);
  void* recvbuf = buffer(b, o.registered, recvBytes);

  if (rank == 0) {
    printf("#\n#%70s%36s\n", "out-of-place", "in-place");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s%s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong", o.ternary ? "     wire   xdense" : "");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s%s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
           o.ternary ? "      (B)         " : "");
  }
  // Like nccl-tests: warm up once at the largest size before the sweep, so
  // the first row does not pay for connection set-up and cold caches.
  {
    Sizes w = t.sizes(o.maxBytes, ternTypeSize(o.types[0]), nranks, rank);
    for (int i = 0; i < o.warmup; ++i)
      PERF_CHECK(b, t.run(b, sendbuf, recvbuf, w.count, o.types[0],
                          t.hasOp ? o.ops[0] : ternSum, o.root));
  }
  double bwSum = 0;
  int bwCount = 0;
  size_t wrongTotal = 0;
  std::vector<ternRedOp_t> ops = t.hasOp ? o.ops : std::vector<ternRedOp_t>{ternSum};
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes;
       bytes = o.stepFactor > 1 ? static_cast<size_t>(bytes * o.stepFactor) : bytes + o.stepBytes) {
    for (ternDataType_t dt : o.types) {
      for (ternRedOp_t op : ops) {
        size_t esz = ternTypeSize(dt);
        Sizes s = t.sizes(bytes, esz, nranks, rank);
        char line[256];
        int len = snprintf(line, sizeof line, "%12zu  %12zu  %8s  %6s  %6d",
                           std::max(s.sendElems, s.recvElems) * esz, s.count, typeName(dt),
                           t.hasOp ? opName(op) : "none", t.hasRoot ? o.root : -1);
        double wire = 0, dense = 0;
        for (int inplace = 0; inplace < 2; ++inplace) {
          char* recv = static_cast<char*>(recvbuf) + (inplace ? s.recvInplaceOffset * esz : 0);
          const char* send =
              inplace ? static_cast<char*>(recvbuf) + s.sendInplaceOffset * esz
                      : static_cast<char*>(sendbuf);
          double wrong = 0;
          if (o.check) {
            t.fill(const_cast<char*>(send), s, dt, op, o.root, rank, nranks);
            PERF_CHECK(b, t.run(b, send, recv, s.count, dt, op, o.root));
            wrong = across(b, static_cast<double>(t.check(recv, s, dt, op, o.root, rank, nranks)),
                           ternSum);
          }
          for (int i = 0; i < o.warmup; ++i)
            PERF_CHECK(b, t.run(b, send, recv, s.count, dt, op, o.root));
          PERF_CHECK(b, b.barrier());
          WireMeter meter;
          if (o.ternary) meter.start(b);
          double sec = combineTime(b, timedLoop(b, t, o, send, recv, s, dt, op, &wrong), o.average);
          if (o.ternary && !inplace) meter.stop(b, o.iters, &wire, &dense);
          double algbw = static_cast<double>(std::max(s.sendElems, s.recvElems) * esz) / 1e9 / sec;
          double busbw = algbw * t.busFactor(nranks);
          bwSum += busbw;
          ++bwCount;
          wrongTotal += static_cast<size_t>(wrong);
          char wrongStr[16];
          if (o.check) snprintf(wrongStr, sizeof wrongStr, "%zu", static_cast<size_t>(wrong));
          else snprintf(wrongStr, sizeof wrongStr, "N/A");
          len += snprintf(line + len, sizeof line - len, "  %7.*f  %6.2f  %6.2f  %6s",
                          sec * 1e6 >= 10000 ? 0 : 2, sec * 1e6, algbw, busbw, wrongStr);
        }
        if (o.ternary)
          snprintf(line + len, sizeof line - len, "  %9.0f  %6.2fx", wire, wire > 0 ? dense / wire : 0.0);
        if (rank == 0) printf("%s\n", line);
        fflush(stdout);
      }
    }
    if (o.stepFactor <= 1 && o.stepBytes == 0) break;
    if (bytes == 0 && o.stepFactor > 1) break;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %zu %s\n", wrongTotal, wrongTotal ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", bwCount ? bwSum / bwCount : 0.0);
  }
  own.reset();
  munmap(sendbuf, sendBytes);
  munmap(recvbuf, recvBytes);
  return wrongTotal ? 1 : 0;
}

}  // namespace ternperf
