/*
 * tern — NCCL-style collective communication library.  Public C99 API.
 *
 * Semantics follow NCCL's where this header is silent.  Host buffers with
 * stream == NULL complete before the call returns (inside a group: by
 * ternGroupEnd).  Device buffers with their cudaStream_t are enqueued on it,
 * as NCCL's: the call returns at once, the operation runs after the work
 * enqueued before it and work enqueued after it waits for it; a failure is
 * the communicator's asynchronous error.  Errors are returned, never
 * raised: ternGetLastError() says in one sentence what went wrong.
 */
#ifndef TERN_TERN_H_
#define TERN_TERN_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default)  /* the library hides everything else */
#endif

#define TERN_MAJOR 0
#define TERN_MINOR 1
#define TERN_PATCH 0
#define TERN_VERSION_CODE (TERN_MAJOR * 10000 + TERN_MINOR * 100 + TERN_PATCH)

typedef struct ternComm* ternComm_t;

#define TERN_UNIQUE_ID_BYTES 128
typedef struct { char internal[TERN_UNIQUE_ID_BYTES]; } ternUniqueId;

typedef enum { ternSuccess = 0, ternUnhandledCudaError = 1, ternSystemError = 2,
               ternInternalError = 3, ternInvalidArgument = 4, ternInvalidUsage = 5,
               ternRemoteError = 6, ternInProgress = 7, ternTimeout = 8 } ternResult_t;

typedef enum { ternInt8 = 0, ternUint8, ternInt32, ternUint32, ternInt64, ternUint64,
               ternFloat16, ternFloat32, ternFloat64, ternBfloat16,
               ternNumTypes /* not a type: the number of types */ } ternDataType_t;

typedef enum { ternSum = 0, ternProd, ternMax, ternMin, ternAvg,
               ternNumOps /* not an op: the number of ops */,
               ternMaxRedOp = 0x7fffffff /* not an op: PreMulSum ops take values up to it */
             } ternRedOp_t;

typedef void* ternStream_t;   /* a cudaStream_t for device buffers; NULL for host buffers */

const char*  ternGetErrorString(ternResult_t result);
const char*  ternGetLastError(ternComm_t comm);          /* comm may be NULL */
ternResult_t ternGetVersion(int* version);
ternResult_t ternGetUniqueId(ternUniqueId* uniqueId);
ternResult_t ternCommInitRank(ternComm_t* comm, int nranks, ternUniqueId commId, int rank);
ternResult_t ternCommInitFromEnv(ternComm_t* comm);
ternResult_t ternCommDestroy(ternComm_t comm);
ternResult_t ternCommAbort(ternComm_t comm);
ternResult_t ternCommGetAsyncError(ternComm_t comm, ternResult_t* asyncError);
ternResult_t ternCommCount(const ternComm_t comm, int* count);
ternResult_t ternCommUserRank(const ternComm_t comm, int* rank);

ternResult_t ternAllReduce(const void* sendbuff, void* recvbuff, size_t count,
    ternDataType_t datatype, ternRedOp_t op, ternComm_t comm, ternStream_t stream);
ternResult_t ternBroadcast(const void* sendbuff, void* recvbuff, size_t count,
    ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream);
ternResult_t ternReduce(const void* sendbuff, void* recvbuff, size_t count,
    ternDataType_t datatype, ternRedOp_t op, int root, ternComm_t comm, ternStream_t stream);
ternResult_t ternAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
    ternDataType_t datatype, ternComm_t comm, ternStream_t stream);
ternResult_t ternReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
    ternDataType_t datatype, ternRedOp_t op, ternComm_t comm, ternStream_t stream);
ternResult_t ternSend(const void* sendbuff, size_t count, ternDataType_t datatype,
    int peer, ternComm_t comm, ternStream_t stream);
ternResult_t ternRecv(void* recvbuff, size_t count, ternDataType_t datatype,
    int peer, ternComm_t comm, ternStream_t stream);
ternResult_t ternGroupStart(void);
/* A call refused inside the group fails it: the outermost end returns that
 * error and issues nothing of the group. */
ternResult_t ternGroupEnd(void);
ternResult_t ternBarrier(ternComm_t comm);

/* NCCL 2.28's all-to-all, gather and scatter: count elements per rank pair; rank j's block is
 * at buff + j*count (gather: the root's recvbuff; scatter: the root's sendbuff).  In place:
 * gather sendbuff == recvbuff + root*count on the root, scatter recvbuff == sendbuff +
 * root*count on the root, all-to-all sendbuff == recvbuff (staged through a copy). */
ternResult_t ternAllToAll(const void* sendbuff, void* recvbuff, size_t count,
    ternDataType_t datatype, ternComm_t comm, ternStream_t stream);
ternResult_t ternGather(const void* sendbuff, void* recvbuff, size_t count,
    ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream);
ternResult_t ternScatter(const void* sendbuff, void* recvbuff, size_t count,
    ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream);

/* Ternary-compressed allreduce: datatype float32, float16 or bfloat16; op ternSum or ternAvg. */
ternResult_t ternAllReduceTernary(const void* sendbuff, void* recvbuff, size_t count,
    ternDataType_t datatype, ternRedOp_t op, ternComm_t comm, ternStream_t stream);

/* ---- Priorities and asynchronous requests -------------------------------- */

#define TERN_PRIORITY_LEVELS 8          /* 0 = most urgent ... 7 = bulk */
#define TERN_PRIORITY_DEFAULT 4
typedef struct ternRequest* ternRequest_t;

/* Priority of the calling thread's subsequent operations (all communicators).
 * Operations are matched across ranks per level, in issue order: the k-th
 * collective of level p meets the k-th collective of level p on the other
 * ranks; send/recv match per peer pair and level.  Levels are independent:
 * an urgent operation overtakes bulk ones at the next chunk boundary. */
ternResult_t ternSetPriority(int priority);           /* ternInvalidArgument outside 0..7 */
ternResult_t ternGetPriority(int* priority);

/* Like ternGroupEnd, but returns at once: the group's operations go on in the background. */
ternResult_t ternGroupEndAsync(ternRequest_t* request);
/* *done = 0: still running (returns ternSuccess). *done = 1: finished; returns the
 * operations' result (first error) and releases the request. */
ternResult_t ternRequestTest(ternRequest_t request, int* done);
/* Waits for completion (bounded by the timeout), returns the result, releases the request. */
ternResult_t ternRequestWait(ternRequest_t request);

/* ---- Communicator configuration (NCCL-style, grows by appending fields) ---- */

#define TERN_CONFIG_MAGIC 0x7465726eu   /* "tern" */
#define TERN_CONFIG_UNDEF_INT (-2147483647 - 1)
#define TERN_CONFIG_UNDEF_DOUBLE (-1.0)

typedef struct {
  size_t size;             /* sizeof(ternConfig_t) as the caller compiled it */
  unsigned int magic;      /* TERN_CONFIG_MAGIC */
  unsigned int version;    /* TERN_VERSION_CODE of the caller's header */
  /* Fields left at their TERN_CONFIG_INITIALIZER value mean "environment or default". */
  int blocking;            /* 1: calls return when complete; 0: they return ternInProgress and
                              ternCommGetAsyncError says when all are done   (default 1) */
  double timeoutSeconds;   /* longest wait without progress                 (TERN_TIMEOUT, 300) */
  int flowClasses;         /* network flow classes the 8 levels map onto, 1..8 (TERN_FLOW_CLASSES, 3) */
  int trafficClass[TERN_PRIORITY_LEVELS]; /* DSCP (0..63) of each flow class's packets
                                              (TERN_FLOW_DSCP, 46,18,10) */
  int ternarySet;          /* 1: use `ternary` below instead of TERN_TERNARY_* */
  struct {
    unsigned long long seed;
    int blockSize;
    float clip;
    int errorFeedback;
    size_t minBytes;
  } ternary;               /* same fields as ternTernaryConfig_t */
} ternConfig_t;

#define TERN_CONFIG_INITIALIZER                                                           \
  { sizeof(ternConfig_t), TERN_CONFIG_MAGIC, TERN_VERSION_CODE, TERN_CONFIG_UNDEF_INT,    \
    TERN_CONFIG_UNDEF_DOUBLE, TERN_CONFIG_UNDEF_INT,                                      \
    { TERN_CONFIG_UNDEF_INT, TERN_CONFIG_UNDEF_INT, TERN_CONFIG_UNDEF_INT,                \
      TERN_CONFIG_UNDEF_INT, TERN_CONFIG_UNDEF_INT, TERN_CONFIG_UNDEF_INT,                \
      TERN_CONFIG_UNDEF_INT, TERN_CONFIG_UNDEF_INT },                                     \
    0, { 0, 0, 0.0f, 0, 0 } }

/* ternCommInitRank with options; config may be NULL (all defaults).  An older,
 * smaller struct (smaller size) is accepted: the fields it lacks are unset. */
ternResult_t ternCommInitRankConfig(ternComm_t* comm, int nranks, ternUniqueId commId, int rank,
                                    const ternConfig_t* config);
/* ternCommInitFromEnv with options. */
ternResult_t ternCommInitFromEnvConfig(ternComm_t* comm, const ternConfig_t* config);

/* ---- Extensions --------------------------------------------------------- */

/* Size in bytes of one element of datatype, or 0 for an invalid type. */
size_t ternTypeSize(ternDataType_t datatype);

/* Which transport carries traffic between this rank and peer:
 * "self", "shm" or "tcp" (pointer to a static string, NULL on error). */
const char* ternCommPeerTransport(const ternComm_t comm, int peer);

/* The ring order ring collectives use: ranks[i] is the rank at position i
 * (nranks entries).  Ranks of one host are contiguous. */
ternResult_t ternCommRingOrder(const ternComm_t comm, int* ranks);

/* Receives count elements from whichever rank sends to this one first (at the
 * calling thread's priority level; a send from rank r is matched in r's
 * issue order as with ternRecv).  *source is set to that rank by the time
 * the operation completes (keep it valid until then, like recvbuff).  Inside
 * a group or a ternGroupEndAsync request like any receive.  Receives issued
 * after it, from any rank, wait until it has picked its sender.  count must
 * be at least 1. */
ternResult_t ternRecvAnySource(void* recvbuff, size_t count, ternDataType_t datatype,
    int* source, ternComm_t comm, ternStream_t stream);

/* NCCL's PreMulSum (ncclRedOpCreatePreMulSum): a reduction op of this
 * communicator, for ternAllReduce, ternReduce and ternReduceScatter on
 * `datatype`, that sums every rank's input multiplied by that rank's
 * scalar (one element of datatype; 16-bit floats multiplied in float32 and
 * rounded once, integers wrapping).  ternScalarHostImmediate: *scalar, host
 * memory, is read now.  ternScalarDevice: scalar is read when each
 * operation that uses the op starts: with host buffers it must be host
 * memory; on a stream it may be device memory (read on the stream, in its
 * order) or host memory (read once the stream's earlier work is done).  The
 * scaled input is the operation's own (never the caller's buffer).  Ranks
 * may use different op values; ternRedOpDestroy frees the op (operations
 * already called keep what they need).  Not for ternAllReduceTernary. */
typedef enum { ternScalarDevice = 0, ternScalarHostImmediate = 1 } ternScalarResidence_t;
ternResult_t ternRedOpCreatePreMulSum(ternRedOp_t* op, void* scalar, ternDataType_t datatype,
    ternScalarResidence_t residence, ternComm_t comm);
ternResult_t ternRedOpDestroy(ternRedOp_t op, ternComm_t comm);

/* Host memory that ranks on one host can read from each other, as NCCL's
 * ncclMemAlloc is for device memory: a send/recv, all-to-all, gather or
 * scatter, or a 2-rank broadcast, of at least 128 KiB (and TERN_SHM_IPC
 * bytes), or a 2-rank allgather's block of at least 256 KiB, from such a
 * buffer to a rank on the same host is one copy, the receiver's, instead
 * of two through the shared fifo; a 2-rank
 * reduce's root reduces straight out of the other rank's such buffer (up to
 * 512 KiB), and so does each rank of a 2-rank reduce-scatter (blocks of at
 * least 256 KiB).  Any buffer may be passed to any call either way; only where a
 * sender's buffer lies in one allocation does it count.  The memory is
 * page-aligned, zeroed and shared (a memfd); free it with ternMemFree (NULL
 * is a no-op).  Bad arguments, or a pointer ternMemAlloc did not return,
 * give ternInvalidArgument; no memory, ternSystemError. */
ternResult_t ternMemAlloc(void** ptr, size_t size);
ternResult_t ternMemFree(void* ptr);

/* ---- Weight streams (docs/DESIGN.md, "Weight streaming and live layer migration") ----
 * A one-way stream of versions of a set of host tensors from `sender` to
 * the other rank, moved in the background by the communicator's engine at
 * the stream's priority level (7 = bulk is the usual choice), in chunks,
 * over that level's connection to the peer, beside other traffic.  The
 * receiver only ever sees complete versions, newest first.  Versions are
 * >= 0 and increase.  Several streams per communicator and per rank pair
 * may be open; both ranks open them in the same order.  Close every
 * stream before ternCommDestroy. */
typedef struct ternWeightStream* ternWeightStream_t;
/* Collective between comm ranks `self` and `peer` (both call it with the same list):
 * a one-way stream of versions of a set of tensors from `sender` to the other. */
ternResult_t ternWeightStreamOpen(ternComm_t comm, int peer, int sender, int ntensors,
    const size_t* counts, const ternDataType_t* types, int priority, ternWeightStream_t* ws);
/* Sender: snapshots the tensors (copy to staging) as `version` and streams it in the
 * background at the stream's priority; returns at once. A newer push may supersede an
 * older one that has not started to move. */
ternResult_t ternWeightStreamPush(ternWeightStream_t ws, const void* const* tensors,
    long long version);
/* Receiver: if a complete version newer than *version has arrived, copies the newest into
 * tensors and sets *version; otherwise leaves both as they are. Never blocks. */
ternResult_t ternWeightStreamPoll(ternWeightStream_t ws, void* const* tensors,
    long long* version);
/* Receiver: blocks until version >= minVersion has arrived, then as Poll. */
ternResult_t ternWeightStreamWait(ternWeightStream_t ws, void* const* tensors,
    long long minVersion, long long* version);
/* Both sides; versions pushed before Close are delivered (or superseded) first, bounded by
 * the timeout.  The stream is released whatever Close returns. */
ternResult_t ternWeightStreamClose(ternWeightStream_t ws);

/* Bytes this rank has put on the wire / taken off it since the comm was made. */
typedef struct { unsigned long long bytesSent, bytesRecv, ops; } ternCommStats_t;
ternResult_t ternCommGetStats(const ternComm_t comm, ternCommStats_t* stats);

/* The same bytes per network flow class (levels map onto classes as
 * ternConfig_t.flowClasses says; class 0 is the most urgent), and each
 * class's DSCP.  Set stats->size = sizeof(ternFlowStats_t) first: the struct
 * grows by appending fields and an older caller's smaller one is filled as
 * far as it reaches. */
typedef struct {
  size_t size;                                        /* set by the caller */
  int flowClasses;                                    /* entries in use below */
  int dscp[TERN_PRIORITY_LEVELS];                     /* each class's mark (0: unmarked) */
  unsigned long long bytesSent[TERN_PRIORITY_LEVELS]; /* put on the wire, per class */
  unsigned long long bytesRecv[TERN_PRIORITY_LEVELS]; /* taken off it, per class */
} ternFlowStats_t;
ternResult_t ternCommGetFlowStats(const ternComm_t comm, ternFlowStats_t* stats);

/* ---- Ternary-compressed allreduce: options, error feedback, accounting ---- */

typedef struct {
  unsigned long long seed;  /* Philox key with the rank; same on every rank  (TERN_TERNARY_SEED) */
  int blockSize;            /* elements per scale block, a multiple of 64     (TERN_TERNARY_BLOCK) */
  float clip;               /* clip at clip * sigma of the block; 0 = off     (TERN_TERNARY_CLIP) */
  int errorFeedback;        /* keep per-tensor residuals (0/1)                (TERN_TERNARY_EF) */
  size_t minBytes;          /* smaller buffers use the dense allreduce        (TERN_TERNARY_MIN_BYTES) */
} ternTernaryConfig_t;

/* Options of comm's ternary allreduces; set them identically on every rank. */
ternResult_t ternCommGetTernaryConfig(const ternComm_t comm, ternTernaryConfig_t* config);
ternResult_t ternCommSetTernaryConfig(ternComm_t comm, const ternTernaryConfig_t* config);

/* ternAllReduceTernary with a tensor handle: with error feedback on, the
 * library keeps one float32 residual per element per handle (4 bytes x count;
 * ternAllReduceTernary uses sendbuff as the handle).  Release with
 * ternCommReleaseTensor. */
ternResult_t ternAllReduceTernaryEx(const void* sendbuff, void* recvbuff, size_t count,
    ternDataType_t datatype, ternRedOp_t op, const void* tensorHandle, ternComm_t comm,
    ternStream_t stream);
ternResult_t ternCommReleaseTensor(ternComm_t comm, const void* tensorHandle);

typedef struct {
  unsigned long long calls;          /* ternary allreduces made */
  unsigned long long fallbacks;      /* of which ran dense (too small, one rank, ...) */
  unsigned long long elements;       /* elements reduced by compressed calls */
  unsigned long long payloadBytes;   /* encoded bytes this rank sent (chunk payloads) */
  unsigned long long wireBytes;      /* every byte this rank sent in those calls (+ scales, headers) */
  unsigned long long denseBytes;     /* what a dense ring allreduce would have sent */
} ternTernaryStats_t;
ternResult_t ternCommGetTernaryStats(const ternComm_t comm, ternTernaryStats_t* stats);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* TERN_TERN_H_ */
