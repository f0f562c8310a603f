/*
 * pipeline_migration: a pipeline-parallel trainer with live layer migration,
 * using tern's C API only (send/recv, priorities, weight streams).  It mirrors
 * the protocol of docs/DESIGN.md ("Weight streaming and live layer
 * migration", seed 000) for custom trainers without torch.
 *
 *   ternrun -n 3 build/examples/pipeline_migration [--iters 12] [--layers 6]
 *       [--migrate ITER:FROM:TO:NLAYERS ...] [--save DIR]
 *
 * The model is a chain of L matrix layers h' = tanh(W h) (width D), split
 * into one stage per rank; each iteration runs M micro-batches forward, then
 * backward (a synchronous flushing schedule), and one SGD-with-momentum step,
 * on generated data.  --migrate moves NLAYERS layers between adjacent stages
 * FROM and TO at the end of iteration ITER without stopping training:
 *
 *   1. every iteration starts with a control message to each neighbour
 *      (level 0): "nothing" or "migrate (k, n, first global layer)" (under a
 *      flushing schedule it precedes both the forward and the backward of k,
 *      so it is on time for either direction);
 *   2. both stages open a weight stream for the moving layers' weights and
 *      momentum (bulk level 7) — the migration's own connection;
 *   3. the outgoing stage pushes the moving layers as version k+1 right after
 *      its update of iteration k (before the forward of k+1); the receiving
 *      stage installs them before that forward (Wait, bounded by the timeout);
 *   4. from iteration k+1 on both use the new partition (activations cross the
 *      new boundary), the outgoing stage frees the moved layers, and the
 *      stream is closed.
 * Under this flushing schedule no micro-batch of iteration k is in flight
 * when the partition changes, so the final weights are bitwise equal to a run
 * without migration (same seed): tests/CMakeLists.txt checks that with
 * --save and cmp, in both directions.  Every step is printed as one event
 * line ("[stage] iter k: ...") so a test can check when it happened.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tern/tern.h>

#define D 48      /* layer width */
#define B 8       /* samples per micro-batch */
#define M 4       /* micro-batches per iteration */
#define MAXL 32   /* layers at most */
#define MAXMIG 8  /* --migrate options at most */
#define LR 0.05f
#define MOMENTUM 0.9f

#define CHECK(call)                                                                      \
  do {                                                                                   \
    ternResult_t r_ = (call);                                                            \
    if (r_ != ternSuccess) {                                                             \
      fprintf(stderr, "[%d] %s:%d %s: %s\n", g_rank, __FILE__, __LINE__, #call,          \
              ternGetLastError(g_comm));                                                 \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

static ternComm_t g_comm;
static int g_rank, g_nstages;

/* ---- the model: layers owned by this stage ---------------------------------- */
typedef struct {
  float w[D * D], mom[D * D], grad[D * D];
} Layer;

static Layer* g_layer[MAXL]; /* global index -> layer, NULL where another stage owns it */
static int g_first, g_count; /* this stage's layers: [g_first, g_first + g_count) */

static unsigned long long mix(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
/* A deterministic value in [-1, 1) for (a, b, c): weights and data depend on
 * their global coordinates only, never on the partition. */
static float coord(unsigned long long a, unsigned long long b, unsigned long long c) {
  return (float)((mix(a * 1000003ULL + mix(b * 7919ULL + c)) >> 11) / 4503599627370496.0 - 1.0);
}

static Layer* new_layer(int l) {
  Layer* y = calloc(1, sizeof *y);
  if (!y) exit(1);
  for (int i = 0; i < D * D; ++i) y->w[i] = coord(1, (unsigned long long)l, (unsigned long long)i) / sqrtf(D);
  return y;
}

/* ---- compute ------------------------------------------------------------------ */
/* Activations of micro-batch mb: act[mb][j] is the input of local layer j
 * (j = g_count: the stage's output), B x D each. */
static float act[M][MAXL + 1][B * D];

static void forward_layer(const Layer* y, const float* in, float* out) {
  for (int s = 0; s < B; ++s)
    for (int o = 0; o < D; ++o) {
      float z = 0;
      for (int i = 0; i < D; ++i) z += y->w[o * D + i] * in[s * D + i];
      out[s * D + o] = tanhf(z);
    }
}

/* dout: gradient w.r.t. the layer's output; accumulates dW, writes din. */
static void backward_layer(Layer* y, const float* in, const float* out, const float* dout, float* din) {
  float dz[B * D];
  for (int k = 0; k < B * D; ++k) dz[k] = dout[k] * (1 - out[k] * out[k]);
  for (int o = 0; o < D; ++o)
    for (int i = 0; i < D; ++i) {
      float g = 0;
      for (int s = 0; s < B; ++s) g += dz[s * D + o] * in[s * D + i];
      y->grad[o * D + i] += g;
    }
  for (int s = 0; s < B; ++s)
    for (int i = 0; i < D; ++i) {
      float g = 0;
      for (int o = 0; o < D; ++o) g += y->w[o * D + i] * dz[s * D + o];
      din[s * D + i] = g;
    }
}

static void sgd_step(void) {
  for (int l = g_first; l < g_first + g_count; ++l) {
    Layer* y = g_layer[l];
    for (int i = 0; i < D * D; ++i) {
      y->mom[i] = MOMENTUM * y->mom[i] + y->grad[i] / (B * M);
      y->w[i] -= LR * y->mom[i];
      y->grad[i] = 0;
    }
  }
}

/* ---- one iteration: M forwards, then M backwards (flushing) ------------------- */
static const int kActLevel = 2; /* activations and gradients: a level of their own */

static float run_iteration(int it) {
  float loss = 0, grad[B * D];
  ternSetPriority(kActLevel);
  for (int mb = 0; mb < M; ++mb) {
    float* x = act[mb][0];
    if (g_rank == 0)
      for (int k = 0; k < B * D; ++k) x[k] = coord(2, (unsigned long long)(it * M + mb), (unsigned long long)k);
    else
      CHECK(ternRecv(x, B * D, ternFloat32, g_rank - 1, g_comm, NULL));
    for (int j = 0; j < g_count; ++j) forward_layer(g_layer[g_first + j], act[mb][j], act[mb][j + 1]);
    if (g_rank < g_nstages - 1) CHECK(ternSend(act[mb][g_count], B * D, ternFloat32, g_rank + 1, g_comm, NULL));
  }
  for (int mb = M - 1; mb >= 0; --mb) {
    const float* y = act[mb][g_count];
    if (g_rank == g_nstages - 1) {  /* loss 0.5 |y - target|^2: the target is a fixed function of x */
      for (int k = 0; k < B * D; ++k) {
        float t = 0.5f * coord(3, (unsigned long long)(it * M + mb), (unsigned long long)k);
        grad[k] = y[k] - t;
        loss += 0.5f * grad[k] * grad[k];
      }
    } else {
      CHECK(ternRecv(grad, B * D, ternFloat32, g_rank + 1, g_comm, NULL));
    }
    for (int j = g_count - 1; j >= 0; --j) {
      float din[B * D];
      backward_layer(g_layer[g_first + j], act[mb][j], act[mb][j + 1], grad, din);
      memcpy(grad, din, sizeof grad);
    }
    if (g_rank > 0) CHECK(ternSend(grad, B * D, ternFloat32, g_rank - 1, g_comm, NULL));
  }
  sgd_step();
  return loss;
}

/* ---- migration ------------------------------------------------------------------ */
typedef struct { int iter, from, to, n; } Migration;
typedef struct { int kind, iter, n, first; } Control; /* kind 0: nothing; 1: migrate */

static Migration g_mig[MAXMIG];
static int g_nmig;

/* The moving layers' weights and momentum, as one stream's tensor list. */
static int stream_tensors(int first, int n, void** tensors, size_t* counts, ternDataType_t* types) {
  for (int j = 0; j < n; ++j) {
    tensors[2 * j] = g_layer[first + j]->w;
    tensors[2 * j + 1] = g_layer[first + j]->mom;
    counts[2 * j] = counts[2 * j + 1] = D * D;
    types[2 * j] = types[2 * j + 1] = ternFloat32;
  }
  return 2 * n;
}

/* Step 1: each stage tells each neighbour what it starts at the end of this
 * iteration (the outgoing stage decides; both ends learn it from the message). */
static void exchange_control(int it, Control in[2]) {
  Control out[2] = {{0, it, 0, 0}, {0, it, 0, 0}}; /* [0]: to the left, [1]: to the right */
  for (int i = 0; i < g_nmig; ++i) {
    const Migration* m = &g_mig[i];
    if (m->iter != it || m->from != g_rank) continue;
    int right = m->to > m->from;
    /* Moving right: this stage's last layers; moving left: its first ones. */
    out[right] = (Control){1, it, m->n, right ? g_first + g_count - m->n : g_first};
  }
  memset(in, 0, 2 * sizeof *in);
  ternSetPriority(0);
  CHECK(ternGroupStart());
  for (int side = 0; side < 2; ++side) {
    int peer = side ? g_rank + 1 : g_rank - 1;
    if (peer < 0 || peer >= g_nstages) continue;
    CHECK(ternSend(&out[side], sizeof(Control), ternUint8, peer, g_comm, NULL));
    CHECK(ternRecv(&in[side], sizeof(Control), ternUint8, peer, g_comm, NULL));
  }
  CHECK(ternGroupEnd());
  for (int side = 0; side < 2; ++side)
    if (out[side].kind)
      printf("[%d] iter %d: migration message to stage %d: %d layer(s) from %d\n", g_rank, it,
             g_rank + (side ? 1 : -1), out[side].n, out[side].first);
}

/* Steps 2-4 for one side's migration, after this iteration's update. */
static void migrate(int it, const Control* c, int outgoing, int peer) {
  void* tensors[2 * MAXL];
  size_t counts[2 * MAXL];
  ternDataType_t types[2 * MAXL];
  if (!outgoing)
    for (int j = 0; j < c->n; ++j) g_layer[c->first + j] = calloc(1, sizeof(Layer));  /* instantiate */
  int nt = stream_tensors(c->first, c->n, tensors, counts, types);
  ternWeightStream_t ws;
  CHECK(ternWeightStreamOpen(g_comm, peer, outgoing ? g_rank : peer, nt, counts, types, 7, &ws));
  long long version = it + 1;
  if (outgoing) {
    CHECK(ternWeightStreamPush(ws, (const void* const*)tensors, version));
    printf("[%d] iter %d: pushed layers %d..%d as version %lld\n", g_rank, it, c->first,
           c->first + c->n - 1, version);
  } else {
    long long got = -1;
    CHECK(ternWeightStreamWait(ws, tensors, version, &got));
    printf("[%d] iter %d: installed layers %d..%d version %lld before forward %d\n", g_rank, it,
           c->first, c->first + c->n - 1, got, it + 1);
  }
  CHECK(ternWeightStreamClose(ws));
  int right = (outgoing ? peer > g_rank : peer < g_rank);  /* the layers move rightwards */
  if (outgoing) {
    for (int j = 0; j < c->n; ++j) free(g_layer[c->first + j]), g_layer[c->first + j] = NULL;
    g_count -= c->n;
    if (!right) g_first += c->n;
  } else {
    g_count += c->n;
    if (right) g_first -= c->n;
  }
  printf("[%d] iter %d: partition now layers %d..%d\n", g_rank, it, g_first, g_first + g_count - 1);
}

/* ---- main ------------------------------------------------------------------------ */
static void save(const char* dir) {
  for (int l = g_first; l < g_first + g_count; ++l) {
    char path[512];
    snprintf(path, sizeof path, "%s/layer%d.bin", dir, l);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(g_layer[l]->w, sizeof(float), D * D, f) != D * D) exit(1);
    fclose(f);
  }
}

static void usage(const char* why) {
  fprintf(stderr, "pipeline_migration: %s\nusage: pipeline_migration [--iters N] [--layers L] "
                  "[--migrate ITER:FROM:TO:NLAYERS ...] [--save DIR]\n", why);
  exit(2);
}

int main(int argc, char** argv) {
  int iters = 12, layers = 6;
  const char* dir = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--save") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--migrate") && i + 1 < argc && g_nmig < MAXMIG) {
      Migration* m = &g_mig[g_nmig++];
      if (sscanf(argv[++i], "%d:%d:%d:%d", &m->iter, &m->from, &m->to, &m->n) != 4)
        usage("--migrate wants ITER:FROM:TO:NLAYERS");
    } else usage("unknown argument");
  }
  CHECK(ternCommInitFromEnv(&g_comm));
  ternCommUserRank(g_comm, &g_rank);
  ternCommCount(g_comm, &g_nstages);
  if (layers < g_nstages || layers > MAXL) usage("--layers must be between the stage count and 32");
  for (int i = 0; i < g_nmig; ++i)
    if (abs(g_mig[i].to - g_mig[i].from) != 1 || g_mig[i].n < 1 || g_mig[i].from < 0 ||
        g_mig[i].to < 0 || g_mig[i].from >= g_nstages || g_mig[i].to >= g_nstages)
      usage("a migration moves at least one layer between adjacent stages");
  /* An even split, the first stages taking the remainder. */
  g_count = layers / g_nstages + (g_rank < layers % g_nstages);
  g_first = g_rank * (layers / g_nstages) + (g_rank < layers % g_nstages ? g_rank : layers % g_nstages);
  for (int l = g_first; l < g_first + g_count; ++l) g_layer[l] = new_layer(l);

  for (int it = 0; it < iters; ++it) {
    Control in[2];
    for (int i = 0; i < g_nmig; ++i)  /* a stage must keep one layer */
      if (g_mig[i].iter == it && g_mig[i].from == g_rank && g_mig[i].n >= g_count)
        usage("a migration would leave its stage without layers");
    exchange_control(it, in);
    float loss = run_iteration(it);
    if (g_rank == g_nstages - 1) printf("[%d] iter %d: loss %.6f\n", g_rank, it, loss);
    /* Disjoint pairs migrate at the same time; a stage in two pairs does
     * them in the order given, which every stage shares (no crossed waits). */
    for (int i = 0; i < g_nmig; ++i) {
      const Migration* m = &g_mig[i];
      if (m->iter != it) continue;
      if (m->from == g_rank) {
        Control c = {1, it, m->n, m->to > m->from ? g_first + g_count - m->n : g_first};
        migrate(it, &c, 1, m->to);
      } else if (m->to == g_rank) {
        migrate(it, &in[m->from > g_rank], 0, m->from);
      }
    }
  }
  if (dir) save(dir);
  CHECK(ternCommDestroy(g_comm));
  return 0;
}
