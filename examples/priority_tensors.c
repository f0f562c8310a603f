/*
 * priority_tensors: what tern.torch.PriorityScheduler does, for a custom
 * trainer in C: each gradient tensor's allreduce is issued, as soon as the
 * backward has produced it, at its own priority level, and the next forward
 * waits only for the tensors of the layer it is about to run.
 *
 *   ternrun -n 2 build/examples/priority_tensors [iterations]
 *
 * Layers 0..L-1 of a model whose last layers hold most of the parameters
 * (seed 004's skew).  The backward produces gradients from the last layer
 * to the first; layer i is issued at level i * 8 / L (the first layer most
 * urgent, "layer" order; tern-plan priorities gives TicTac's levels), each
 * as its own asynchronous group (ternGroupEndAsync).  The next forward then
 * waits for layer 0's request, updates layer 0, runs it, then layer 1 ...
 * so the big last layers' transfers go on while the first layers compute.
 * Ranks match operations per level in issue order: every rank issues each
 * level's tensors in the same order (here: the backward's).
 *
 * Exit 0 when every averaged gradient is exact (each rank's gradient is
 * known: its value is (rank + 1) * (layer + 1)) and a level outside 0..7 is
 * refused; 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <tern/tern.h>

#define LAYERS 6

/* Elements per layer: small first layers, big last ones. */
static const size_t kCount[LAYERS] = {1024, 2048, 8192, 65536, 1 << 20, 1 << 21};

static int level_of(int layer) { return layer * 8 / LAYERS; }

static int check(ternResult_t r, const char* what) {
  if (r == ternSuccess) return 0;
  fprintf(stderr, "%s: %s (%s)\n", what, ternGetErrorString(r), ternGetLastError(NULL));
  return 1;
}

/* The backward: gradient of layer i on this rank, then its allreduce issued at once at its level. */
static int backward_and_issue(float** grad, ternRequest_t* req, int rank, ternComm_t comm) {
  for (int i = LAYERS - 1; i >= 0; --i) {
    for (size_t k = 0; k < kCount[i]; ++k) grad[i][k] = (float)((rank + 1) * (i + 1));
    if (check(ternSetPriority(level_of(i)), "ternSetPriority") || check(ternGroupStart(), "ternGroupStart") ||
        check(ternAllReduce(grad[i], grad[i], kCount[i], ternFloat32, ternSum, comm, NULL), "ternAllReduce") ||
        check(ternGroupEndAsync(&req[i]), "ternGroupEndAsync"))
      return 1;
  }
  return 0;
}

/* The next forward: layer i waits for its own gradient only, then is updated (and would run). */
static int forward_waiting_per_layer(float** grad, ternRequest_t* req, int nranks) {
  int bad = 0;
  float want_per_layer = (float)(nranks * (nranks + 1) / 2);
  for (int i = 0; i < LAYERS; ++i) {
    if (check(ternRequestWait(req[i]), "ternRequestWait")) return 1;
    for (size_t k = 0; k < kCount[i]; ++k) bad |= grad[i][k] != want_per_layer * (float)(i + 1);
    /* here: weight[i] -= lr * grad[i] / nranks; then layer i's forward */
  }
  return bad;
}

int main(int argc, char** argv) {
  int iterations = argc > 1 ? atoi(argv[1]) : 5;
  ternComm_t comm;
  if (check(ternCommInitFromEnv(&comm), "ternCommInitFromEnv")) return 1;
  int rank, nranks;
  ternCommUserRank(comm, &rank);
  ternCommCount(comm, &nranks);
  float* grad[LAYERS];
  for (int i = 0; i < LAYERS; ++i) grad[i] = malloc(kCount[i] * sizeof(float));
  ternRequest_t req[LAYERS];
  int bad = 0;
  for (int it = 0; it < iterations && !bad; ++it) {
    bad = backward_and_issue(grad, req, rank, comm);
    if (!bad) bad = forward_waiting_per_layer(grad, req, nranks);
  }
  /* A level outside 0..7 is refused with a sentence. */
  if (ternSetPriority(8) != ternInvalidArgument) {
    fprintf(stderr, "ternSetPriority(8) was not refused\n");
    bad = 1;
  } else if (rank == 0) {
    printf("ternSetPriority(8): %s\n", ternGetLastError(NULL));
  }
  if (rank == 0) printf("%d iterations of %d tensors at levels 0..%d: %s\n", iterations, LAYERS,
                        level_of(LAYERS - 1), bad ? "WRONG" : "exact averages");
  for (int i = 0; i < LAYERS; ++i) free(grad[i]);
  ternCommDestroy(comm);
  return bad;
}
