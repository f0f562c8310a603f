/* An NCCL program in C99, compiled against the CUDA toolkit's real nccl.h and
 * linked against tern's libnccl.so.2, run as 3 processes over host buffers
 * (NULL stream): every collective with checked results for several datatypes
 * and ops, PreMulSum, groups with send/recv, Split, Shrink, a nonblocking
 * communicator, ncclCommInitAll, GroupSimulateEnd, registration, revoke.
 * Prints "N passed, M failed" and exits 0 only when every check held.
 *   nccl_client [nranks]   (default 3) */
#define _GNU_SOURCE
#include <nccl.h>

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_rank, g_nranks, g_pass, g_fail;

static void check(int ok, const char* fmt, ...) {
  if (ok) {
    ++g_pass;
    return;
  }
  ++g_fail;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: FAILED: ", g_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

/* An NCCL call that must succeed. */
#define OK(call)                                                                      \
  do {                                                                                \
    ncclResult_t r_ = (call);                                                         \
    check(r_ == ncclSuccess, "%s:%d %s = %s (%s)", __FILE__, __LINE__, #call,         \
          ncclGetErrorString(r_), ncclGetLastError(NULL));                            \
  } while (0)

/* ---- element access for every datatype the shim maps ---------------------- */

static uint16_t toHalf(double d) { /* exact for the small integers used here */
  float f = (float)d;
  uint32_t b;
  memcpy(&b, &f, 4);
  uint32_t sign = (b >> 16) & 0x8000u;
  int exp = (int)((b >> 23) & 0xff) - 127 + 15;
  uint32_t man = b & 0x7fffffu;
  if (f == 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((uint32_t)exp << 10) | (man >> 13));
}
static double fromHalf(uint16_t h) {
  int exp = (h >> 10) & 0x1f;
  double man = (h & 0x3ff) / 1024.0;
  double v = exp ? ldexp(1.0 + man, exp - 15) : ldexp(man, -14);
  return (h & 0x8000) ? -v : v;
}
static uint16_t toBf16(double d) {
  float f = (float)d;
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)(b >> 16);
}
static double fromBf16(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static size_t esize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

static void put(void* buf, ncclDataType_t t, size_t i, double v) {
  char* p = (char*)buf + i * esize(t);
  switch (t) {
    case ncclInt8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case ncclUint8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case ncclInt32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    case ncclFloat16: { uint16_t x = toHalf(v); memcpy(p, &x, 2); break; }
    case ncclBfloat16: { uint16_t x = toBf16(v); memcpy(p, &x, 2); break; }
    case ncclFloat32: { float x = (float)v; memcpy(p, &x, 4); break; }
    default: { double x = v; memcpy(p, &x, 8); break; }
  }
}

static double get(const void* buf, ncclDataType_t t, size_t i) {
  const char* p = (const char*)buf + i * esize(t);
  switch (t) {
    case ncclInt8: { int8_t x; memcpy(&x, p, 1); return x; }
    case ncclUint8: { uint8_t x; memcpy(&x, p, 1); return x; }
    case ncclInt32: { int32_t x; memcpy(&x, p, 4); return x; }
    case ncclUint32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case ncclInt64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclUint64: { uint64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclFloat16: { uint16_t x; memcpy(&x, p, 2); return fromHalf(x); }
    case ncclBfloat16: { uint16_t x; memcpy(&x, p, 2); return fromBf16(x); }
    case ncclFloat32: { float x; memcpy(&x, p, 4); return x; }
    default: { double x; memcpy(&x, p, 8); return x; }
  }
}

static const char* tname(ncclDataType_t t) {
  static const char* n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                            "float16", "float32", "float64", "bfloat16"};
  return n[t];
}

/* Rank r's element i: small integers, so every op is exact in every type. */
static double val(int r, size_t i) { return (double)(r + 1) + (double)(i % 3); }

static double reduced(ncclRedOp_t op, size_t i, int nranks) {
  double acc = val(0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = val(r, i);
    if (op == ncclSum || op == ncclAvg) acc += v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  return op == ncclAvg ? acc / nranks : acc;
}

static void* fill(ncclDataType_t t, size_t n, int rank) {
  void* b = malloc(n * esize(t) + 1);
  for (size_t i = 0; i < n; ++i) put(b, t, i, val(rank, i));
  return b;
}

static int sameAs(const void* buf, ncclDataType_t t, size_t n, double (*want)(size_t, void*),
                  void* ctx, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (get(buf, t, i) != want(i, ctx)) {
      check(0, "%s %s: element %zu is %g, want %g", what, tname(t), i, get(buf, t, i), want(i, ctx));
      return 0;
    }
  check(1, "");
  return 1;
}

/* ---- the collectives ------------------------------------------------------ */

struct RedCtx { ncclRedOp_t op; int nranks; };
static double wantReduced(size_t i, void* c) {
  struct RedCtx* r = (struct RedCtx*)c;
  return reduced(r->op, i, r->nranks);
}

static const ncclDataType_t kTypes[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                        ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64,
                                        ncclBfloat16};
#define NTYPES (sizeof kTypes / sizeof kTypes[0])

static void testAllReduce(ncclComm_t comm) {
  const size_t n = 1000;
  for (size_t k = 0; k < NTYPES; ++k)
    for (int op = ncclSum; op < ncclNumOps; ++op) {
      ncclDataType_t t = kTypes[k];
      void* s = fill(t, n, g_rank);
      void* r = malloc(n * esize(t));
      struct RedCtx c = {(ncclRedOp_t)op, g_nranks};
      OK(ncclAllReduce(s, r, n, t, (ncclRedOp_t)op, comm, NULL));
      sameAs(r, t, n, wantReduced, &c, "allreduce");
      OK(ncclAllReduce(s, s, n, t, (ncclRedOp_t)op, comm, NULL));  /* in place */
      sameAs(s, t, n, wantReduced, &c, "allreduce in place");
      free(s);
      free(r);
    }
}

struct BlockCtx { int rankOf; size_t count; int perRank; };
/* Element i of the block layout: rank (i / count)'s data, or a fixed rank's. */
static double wantBlock(size_t i, void* c) {
  struct BlockCtx* b = (struct BlockCtx*)c;
  return b->perRank ? val((int)(i / b->count), i % b->count) : val(b->rankOf, i);
}

static void testRooted(ncclComm_t comm, ncclDataType_t t) {
  const size_t n = 257;
  int n3 = g_nranks;
  void* s = fill(t, n * n3, g_rank);
  void* r = calloc(n * n3, esize(t));
  struct BlockCtx fromRoot1 = {1, n, 0}, blocks = {0, n, 1};
  struct RedCtx sum = {ncclSum, g_nranks}, mx = {ncclMax, g_nranks};

  OK(ncclBroadcast(s, r, n, t, 1, comm, NULL));
  sameAs(r, t, n, wantBlock, &fromRoot1, "broadcast");
  void* b = fill(t, n, g_rank);
  OK(ncclBcast(b, n, t, 1, comm, NULL));
  sameAs(b, t, n, wantBlock, &fromRoot1, "bcast");

  memset(r, 0, n * esize(t));
  OK(ncclReduce(s, r, n, t, ncclSum, 2, comm, NULL));
  if (g_rank == 2) sameAs(r, t, n, wantReduced, &sum, "reduce");

  void* mine = fill(t, n, g_rank);
  OK(ncclAllGather(mine, r, n, t, comm, NULL));
  sameAs(r, t, n * n3, wantBlock, &blocks, "allgather");

  /* ReduceScatter: block j of the result, from everyone's block j. */
  void* rs = malloc(n * esize(t));
  OK(ncclReduceScatter(s, rs, n, t, ncclMax, comm, NULL));
  for (size_t i = 0; i < n; ++i)
    if (get(rs, t, i) != reduced(ncclMax, g_rank * n + i, g_nranks)) {
      check(0, "reducescatter %s: element %zu", tname(t), i);
      break;
    }
  (void)mx;

  /* AlltoAll: block j of rank r goes to rank j; here block j of everyone is
   * its own data shifted by j, so rank me receives val(r, me*n + i) from r. */
  OK(ncclAlltoAll(s, r, n, t, comm, NULL));
  int a2aOk = 1;
  for (int src = 0; src < n3 && a2aOk; ++src)
    for (size_t i = 0; i < n; ++i)
      if (get(r, t, src * n + i) != val(src, g_rank * n + i)) {
        check(0, "alltoall %s: from rank %d element %zu", tname(t), src, i);
        a2aOk = 0;
        break;
      }
  if (a2aOk) check(1, "");

  memset(r, 0, n * n3 * esize(t));
  OK(ncclGather(mine, r, n, t, 0, comm, NULL));
  if (g_rank == 0) sameAs(r, t, n * n3, wantBlock, &blocks, "gather");

  /* Scatter from rank 2: rank j gets block j of rank 2's buffer. */
  OK(ncclScatter(s, rs, n, t, 2, comm, NULL));
  for (size_t i = 0; i < n; ++i)
    if (get(rs, t, i) != val(2, g_rank * n + i)) {
      check(0, "scatter %s: element %zu", tname(t), i);
      break;
    }
  free(s); free(r); free(b); free(mine); free(rs);
}

/* ---- PreMulSum: sum over ranks of (rank+1) * x ----------------------------- */

static void testPreMulSum(ncclComm_t comm) {
  const size_t n = 333;
  ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclInt32, ncclBfloat16, ncclFloat16};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; ++k) {
    ncclDataType_t t = types[k];
    char scalar[8];
    put(scalar, t, 0, g_rank + 1);
    ncclRedOp_t op;
    /* Device residence: on the host path the pointer is read when the op runs. */
    ncclScalarResidence_t res = (k % 2) ? ncclScalarDevice : ncclScalarHostImmediate;
    OK(ncclRedOpCreatePreMulSum(&op, scalar, t, res, comm));
    check(op >= ncclNumOps, "premulsum op %d is a built-in value", (int)op);
    void* s = fill(t, n, g_rank);
    void* r = malloc(n * esize(t));
    OK(ncclAllReduce(s, r, n, t, op, comm, NULL));
    int ok = 1;
    for (size_t i = 0; i < n && ok; ++i) {
      double want = 0;
      for (int q = 0; q < g_nranks; ++q) want += (q + 1) * val(q, i);
      if (get(r, t, i) != want) {
        check(0, "premulsum allreduce %s: element %zu is %g, want %g", tname(t), i, get(r, t, i), want);
        ok = 0;
      }
    }
    if (ok) check(1, "");
    /* Reduce with the same op, and the input untouched by the scaling. */
    OK(ncclReduce(s, r, n, t, op, 0, comm, NULL));
    check(get(s, t, 1) == val(g_rank, 1), "premulsum scaled the caller's input");
    if (g_rank == 0) {
      double want = 0;
      for (int q = 0; q < g_nranks; ++q) want += (q + 1) * val(q, 4);
      check(get(r, t, 4) == want, "premulsum reduce %s: %g, want %g", tname(t), get(r, t, 4), want);
    }
    OK(ncclRedOpDestroy(op, comm));
    check(ncclAllReduce(s, r, n, t, op, comm, NULL) == ncclInvalidArgument,
          "a destroyed premulsum op was accepted");
    free(s);
    free(r);
  }
}

/* ---- groups: a ring of send/recv, and collectives with p2p in one group ---- */

static void testGroups(ncclComm_t comm) {
  const size_t n = 4096;
  int next = (g_rank + 1) % g_nranks, prev = (g_rank + g_nranks - 1) % g_nranks;
  float* out = fill(ncclFloat32, n, g_rank);
  float* in = calloc(n, 4);
  float* all = fill(ncclFloat32, n, g_rank);
  OK(ncclGroupStart());
  OK(ncclSend(out, n, ncclFloat32, next, comm, NULL));
  OK(ncclRecv(in, n, ncclFloat32, prev, comm, NULL));
  OK(ncclGroupStart()); /* nested: only the outermost end launches */
  OK(ncclAllReduce(all, all, n, ncclFloat32, ncclSum, comm, NULL));
  OK(ncclGroupEnd());
  check(in[0] == 0 && all[0] == val(g_rank, 0), "a grouped operation ran before ncclGroupEnd");
  OK(ncclGroupEnd());
  struct BlockCtx fromPrev = {prev, n, 0};
  struct RedCtx sum = {ncclSum, g_nranks};
  sameAs(in, ncclFloat32, n, wantBlock, &fromPrev, "group recv");
  sameAs(all, ncclFloat32, n, wantReduced, &sum, "group allreduce");

  /* ncclGroupSimulateEnd plans and launches nothing; the comm stays in step. */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  float* untouched = fill(ncclFloat32, n, g_rank);
  OK(ncclGroupStart());
  OK(ncclAllReduce(untouched, untouched, n, ncclFloat32, ncclSum, comm, NULL));
  OK(ncclGroupSimulateEnd(&sim));
  check(untouched[0] == val(g_rank, 0), "ncclGroupSimulateEnd ran the operation");
  check(sim.estimatedTime == NCCL_UNDEF_FLOAT, "estimatedTime %g", sim.estimatedTime);
  OK(ncclAllReduce(untouched, untouched, n, ncclFloat32, ncclSum, comm, NULL));
  sameAs(untouched, ncclFloat32, n, wantReduced, &sum, "allreduce after a simulated group");
  free(out); free(in); free(all); free(untouched);
}

/* ---- Split and Shrink ---------------------------------------------------- */

/* An allreduce of the parent ranks over child; checks size and sum. */
static void checkChild(ncclComm_t child, const int* parentRanks, int n, int wantRank) {
  int count = -1, rank = -1;
  OK(ncclCommCount(child, &count));
  OK(ncclCommUserRank(child, &rank));
  check(count == n, "child has %d ranks, want %d", count, n);
  check(rank == wantRank, "child rank %d, want %d", rank, wantRank);
  int64_t mine = g_rank, sum = 0, want = 0;
  for (int i = 0; i < n; ++i) want += parentRanks[i];
  OK(ncclAllReduce(&mine, &sum, 1, ncclInt64, ncclSum, child, NULL));
  check(sum == want, "child allreduce %lld, want %lld", (long long)sum, (long long)want);
}

static void testSplit(ncclComm_t comm) {
  /* Colors by parity, keys reversed: among {0, 2} parent rank 2 comes first. */
  ncclComm_t child = NULL;
  OK(ncclCommSplit(comm, g_rank % 2, -g_rank, &child, NULL));
  if (g_rank % 2 == 0) {
    int members[] = {0, 2};
    checkChild(child, members, 2, g_rank == 2 ? 0 : 1);
  } else {
    int members[] = {1};
    checkChild(child, members, 1, 0);
  }
  OK(ncclCommDestroy(child));
  /* NCCL_SPLIT_NOCOLOR: rank 1 gets no communicator. */
  OK(ncclCommSplit(comm, g_rank == 1 ? NCCL_SPLIT_NOCOLOR : 7, g_rank, &child, NULL));
  if (g_rank == 1) {
    check(child == NULL, "NOCOLOR rank got a communicator");
  } else {
    int members[] = {0, 2};
    checkChild(child, members, 2, g_rank == 0 ? 0 : 1);
    /* Revoke: in-flight work done, new work refused, destroy still works. */
    OK(ncclCommRevoke(child, NCCL_REVOKE_DEFAULT));
    float x = 1;
    check(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, child, NULL) == ncclInvalidUsage,
          "a revoked communicator ran an allreduce");
    OK(ncclCommDestroy(child));
  }
}

static void testShrink(ncclComm_t comm) {
  if (g_rank == 1) return; /* excluded ranks do not call ncclCommShrink */
  int exclude[] = {1};
  ncclComm_t child = NULL;
  OK(ncclCommShrink(comm, exclude, 1, &child, NULL, NCCL_SHRINK_DEFAULT));
  int members[] = {0, 2};
  checkChild(child, members, 2, g_rank == 0 ? 0 : 1);
  ncclComm_t none = NULL;
  int self[] = {g_rank};
  check(ncclCommShrink(comm, self, 1, &none, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument &&
            none == NULL,
        "a rank that excludes itself was accepted");
  OK(ncclCommDestroy(child));
}

/* ---- a nonblocking communicator ------------------------------------------ */

static ncclResult_t settle(ncclComm_t comm, ncclResult_t r) {
  time_t start = time(NULL);
  while (r == ncclInProgress && time(NULL) - start < 60) {
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
    if (r == ncclInProgress) usleep(200);
  }
  return r;
}

static void testNonblocking(ncclComm_t comm) {
  ncclUniqueId id;
  if (g_rank == 0) OK(ncclGetUniqueId(&id));
  OK(ncclBroadcast(&id, &id, sizeof id, ncclUint8, 0, comm, NULL)); /* ids travel over the shim */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = "nonblocking";
  ncclComm_t nb = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nb, g_nranks, id, g_rank, &cfg);
  check(r == ncclInProgress || r == ncclSuccess, "nonblocking init returned %s", ncclGetErrorString(r));
  check(nb != NULL, "nonblocking init gave no handle");
  if (!nb) return;
  OK(settle(nb, r));
  const size_t n = 1 << 16;
  double* s = fill(ncclFloat64, n, g_rank);
  r = ncclAllReduce(s, s, n, ncclFloat64, ncclSum, nb, NULL);
  check(r == ncclInProgress || r == ncclSuccess, "nonblocking allreduce returned %s", ncclGetErrorString(r));
  OK(settle(nb, r));
  struct RedCtx sum = {ncclSum, g_nranks};
  sameAs(s, ncclFloat64, n, wantReduced, &sum, "nonblocking allreduce");
  /* PreMulSum on a nonblocking comm: its scratch outlives the call. */
  double two = 2;
  ncclRedOp_t op;
  OK(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat64, ncclScalarHostImmediate, nb));
  double* t = fill(ncclFloat64, n, g_rank);
  OK(settle(nb, ncclAllReduce(t, t, n, ncclFloat64, op, nb, NULL)));
  check(t[5] == 2 * reduced(ncclSum, 5, g_nranks), "nonblocking premulsum %g", t[5]);
  OK(ncclRedOpDestroy(op, nb));
  r = ncclCommFinalize(nb);
  OK(settle(nb, r));
  OK(ncclCommDestroy(nb));
  free(s);
  free(t);
}

/* ---- one process, several ranks: ncclCommInitAll --------------------------- */

static void testInitAll(void) {
  ncclComm_t comms[2] = {NULL, NULL};
  OK(ncclCommInitAll(comms, 2, NULL));
  if (!comms[0] || !comms[1]) return check(0, "ncclCommInitAll gave NULL comms");
  float a[64], b[64];
  for (int i = 0; i < 64; ++i) a[i] = (float)i, b[i] = 100.0f;
  OK(ncclGroupStart()); /* one thread drives both ranks, as with NCCL */
  OK(ncclAllReduce(a, a, 64, ncclFloat32, ncclSum, comms[0], NULL));
  OK(ncclAllReduce(b, b, 64, ncclFloat32, ncclSum, comms[1], NULL));
  OK(ncclGroupEnd());
  check(a[3] == 103.0f && b[3] == 103.0f, "initAll allreduce %g %g", a[3], b[3]);
  OK(ncclCommDestroy(comms[0]));
  OK(ncclCommDestroy(comms[1]));
}

/* ---- errors: code and sentence ------------------------------------------- */

static void expectError(ncclResult_t got, ncclResult_t want, ncclComm_t comm, const char* word,
                        const char* what) {
  const char* msg = ncclGetLastError(comm);
  check(got == want && msg && strstr(msg, word), "%s: got %s (\"%s\"), want %s with \"%s\"", what,
        ncclGetErrorString(got), msg ? msg : "", ncclGetErrorString(want), word);
}

static void testErrors(ncclComm_t comm) {
  float x[4] = {0};
  expectError(ncclAllReduce(x, x, 4, ncclFloat8e4m3, ncclSum, comm, NULL), ncclInvalidArgument,
              comm, "8-bit", "fp8");
  expectError(ncclAllReduce(x, x, 4, (ncclDataType_t)99, ncclSum, comm, NULL), ncclInvalidArgument,
              comm, "datatype 99", "bad dtype");
  expectError(ncclAllReduce(x, x, 4, ncclFloat32, (ncclRedOp_t)77, comm, NULL), ncclInvalidArgument,
              comm, "op 77", "bad op");
  expectError(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument, NULL,
              "comm is NULL", "null comm");
  expectError(ncclBroadcast(x, x, 4, ncclFloat32, 5, comm, NULL), ncclInvalidArgument, comm,
              "root 5", "bad root");
  expectError(ncclSend(x, 4, ncclFloat32, -1, comm, NULL), ncclInvalidArgument, comm, "peer -1",
              "bad peer");
  /* A stream with host buffers: without a device "... no usable CUDA
   * device", with one "... sendbuff is host memory"; both begin so. */
  expectError(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, (cudaStream_t)0x1), ncclInvalidArgument,
              comm, "stream is not NULL but", "stream");
  {
    ncclRedOp_t pm;
    float two = 2.0f;
    OK(ncclRedOpCreatePreMulSum(&pm, &two, ncclFloat32, ncclScalarHostImmediate, comm));
    /* PreMulSum runs on streams too: with host buffers it is refused like
     * every call with a stream, not as an op tern cannot run there. */
    expectError(ncclAllReduce(x, x, 4, ncclFloat32, pm, comm, (cudaStream_t)0x1), ncclInvalidArgument,
                comm, "stream is not NULL but", "premulsum on a stream");
    expectError(ncclAllReduce(x, x, 4, ncclFloat64, pm, comm, NULL), ncclInvalidArgument, comm,
                "was made for float32", "premulsum of another datatype");
    OK(ncclRedOpDestroy(pm, comm));
  }
  expectError(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, comm, "not a live", "destroy sum");
  /* Device memory where this thread has a CUDA context (it has none unless
   * the driver was loaded and a device set), else a sentence saying why. */
  void* p = (void*)0x1;
  ncclResult_t r = ncclMemAlloc(&p, 1024);
  if (r == ncclSuccess) {
    check(p != NULL, "ncclMemAlloc succeeded without a pointer");
    OK(ncclMemFree(p));
  } else {
    expectError(r, ncclInvalidUsage, NULL, "call cudaSetDevice first", "memalloc");
    check(p == NULL, "ncclMemAlloc left a pointer");
  }
  expectError(ncclMemAlloc(NULL, 1024), ncclInvalidArgument, NULL, "ptr is NULL", "memalloc null");
  expectError(ncclMemFree(x), ncclInvalidArgument, NULL, "not allocated by ncclMemAlloc", "memfree");
  OK(ncclMemFree(NULL));
  expectError(ncclGroupEnd(), ncclInvalidUsage, NULL, "no ncclGroupStart", "unmatched groupend");
  int version = 0;
  OK(ncclGetVersion(&version));
  check(version == 22300, "version %d", version);
  int dev = 0;
  OK(ncclCommCuDevice(comm, &dev));
  check(dev == -1, "host comm's device %d", dev);
}

static void testRegister(ncclComm_t comm) {
  static char buf[1 << 16];
  void* h = NULL;
  OK(ncclCommRegister(comm, buf, sizeof buf, &h));
  check(h != NULL, "register gave no handle");
  float* f = (float*)buf; /* a registered buffer works like any other */
  for (int i = 0; i < 16; ++i) f[i] = (float)g_rank;
  OK(ncclAllReduce(f, f, 16, ncclFloat32, ncclMax, comm, NULL));
  check(f[7] == (float)(g_nranks - 1), "allreduce on a registered buffer %g", f[7]);
  OK(ncclCommDeregister(comm, h));
  check(ncclCommDeregister(comm, h) == ncclInvalidArgument, "deregistered twice");
  ncclWindow_t w = NULL;
  OK(ncclCommWindowRegister(comm, buf, sizeof buf, &w, NCCL_WIN_COLL_SYMMETRIC));
  OK(ncclCommWindowDeregister(comm, w));
}

/* ---- the rank body and the launcher --------------------------------------- */

static int rankMain(int rank, int nranks, ncclUniqueId id) {
  g_rank = rank;
  g_nranks = nranks;
  ncclComm_t comm = NULL;
  OK(ncclCommInitRank(&comm, nranks, id, rank));
  if (!comm) return 1;
  int count = 0, me = -1;
  OK(ncclCommCount(comm, &count));
  OK(ncclCommUserRank(comm, &me));
  check(count == nranks && me == rank, "count %d rank %d", count, me);
  testAllReduce(comm);
  testRooted(comm, ncclFloat32);
  testRooted(comm, ncclInt64);
  testRooted(comm, ncclBfloat16);
  testPreMulSum(comm);
  testGroups(comm);
  testSplit(comm);
  testShrink(comm);
  testNonblocking(comm);
  testErrors(comm);
  testRegister(comm);
  if (rank == 0) testInitAll();
  OK(ncclCommFinalize(comm));
  OK(ncclCommDestroy(comm));
  printf("rank %d: %d passed, %d failed\n", rank, g_pass, g_fail);
  fflush(stdout);
  return g_fail ? 1 : 0;
}

int main(int argc, char** argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 3;
  if (nranks != 3) {
    fprintf(stderr, "the checks are written for 3 ranks\n");
    return 2;
  }
  int pipes[3][2];
  pid_t pids[3];
  for (int r = 0; r < nranks; ++r)
    if (pipe(pipes[r])) return 2;
  for (int r = 0; r < nranks; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      ncclUniqueId id;
      if (r == 0) { /* rank 0 makes the id and hands it to the others */
        if (ncclGetUniqueId(&id) != ncclSuccess) _exit(3);
        for (int q = 1; q < nranks; ++q)
          while (write(pipes[q][1], &id, sizeof id) != (ssize_t)sizeof id) {}
      } else if (read(pipes[r][0], &id, sizeof id) != (ssize_t)sizeof id) {
        _exit(3);
      }
      _exit(rankMain(r, nranks, id));
    }
  }
  /* Every rank must exit 0 within the deadline; a hang is a failure. */
  int failed = 0, done = 0;
  time_t start = time(NULL);
  while (done < nranks) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      ++done;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "a rank (pid %d) ended with status 0x%x\n", (int)p, status);
        ++failed;
      }
    } else if (time(NULL) - start > 240) {
      fprintf(stderr, "timeout: killing the ranks\n");
      for (int r = 0; r < nranks; ++r) kill(pids[r], SIGKILL);
      while (wait(NULL) > 0) {}
      failed = nranks;
      break;
    } else {
      usleep(10000);
    }
  }
  printf("%d passed, %d failed\n", nranks - failed, failed);
  return failed ? 1 : 0;
}
