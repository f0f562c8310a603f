// The C API's calls that launch work: argument checks (checks.h), then the
// small path if the engine takes the call inline (comm/inline_calls.h), else an
// Operation for the communicator's executor (or for the open group).
// Communicators themselves: comm_api.cc.  Every failure returns a ternResult_t
// with a sentence for ternGetLastError; nothing aborts the caller.
#include <cstddef>

#include "api/checks.h"
#include "api/group.h"
#include "api/premul.h"
#include "collectives/collectives.h"
#include "collectives/ternary.h"
#include "comm/comm.h"
#include "comm/config.h"
#include "comm/inline_calls.h"
#include "comm/operations.h"
#include "base/dtype.h"
#include "base/error.h"

using namespace tern;

namespace {

// The communicator's ternary allreduce state, made on first use from the
// options resolved at init (collectives/ternary.h).
TernaryState& ternaryOf(ternComm* c) { return ternaryState(c->attached, c->cfg.ternary); }

// A captured call's submission at each replay of its graph (a host node, on
// CUDA's thread): a fresh operation on the call's pinned buffers, at the
// priority of the capture.  The communicator must outlive the graph, as
// with NCCL.
StagedSubmitFor replayOn(ternComm* c) {
  const int level = currentPriority();
  return [c, level](std::shared_ptr<CollArgs> args) -> StagedSubmit {
    return [c, level, args](std::unique_ptr<MemOps> mem) {
      OpPtr op = c->engine->newOperation();
      op->streamMem = std::move(mem);
      makeOp(c, op, *args, nullptr, level);
      launchOp(c, std::move(op));
    };
  };
}

// Runs an operation now, or adds it to the open group.  With a stream (device
// buffers) it is only enqueued: the call returns, and a failure shows up as
// the communicator's asynchronous error.
ternResult_t launch(const InCall& call, ternComm* c, CollArgs args, ternStream_t stream = nullptr,
                    std::unique_ptr<Task> task = nullptr) {
  std::unique_ptr<MemOps> mem;
  if (stream) {
    TERN_CHECK(streamOps(c, &args, !task, stream, collectiveKind(args.kind).name, replayOn(c), &mem));
    if (!mem) return ternSuccess;  // one rank's copy, or recorded in a graph
  }
  // A send or receive of an open group is only recorded (runRecorded
  // enters the communicator again at the group's end).
  ternResult_t alone;
  const bool p2p = args.kind == OpKind::Send || args.kind == OpKind::Recv;
  if (!stream && !task && p2p && recordInGroup(c, args, &alone)) return alone;
  int level;  // the thread's priority, read once for the small path and the operation
  const bool solo = soloCall(&level);
  if (!stream && !task && solo && callInline(c, args, level, &alone)) return alone;
  OpPtr op = c->engine->newOperation();
  op->streamMem = std::move(mem);
  std::string why;
  ternResult_t r = static_cast<int>(args.op) >= ternNumOps ? setUpPreMulSum(c, &args, *op, &why)
                                                            : ternSuccess;
  if (r != ternSuccess) return setError(r, std::string(collectiveKind(args.kind).name) + ": " + why);
  makeOp(c, op, args, std::move(task), level);
  return launchOp(c, std::move(op));
}

}  // namespace


// Gather and scatter: the root's side holds nranks blocks; the other side one.
static ternResult_t rootedBlocks(const InCall& call, const void* one, const void* many, size_t count,
                                 ternDataType_t datatype, int root, ternComm_t comm,
                                 ternStream_t stream, const char* what, const char* manyName) {
  TERN_CHECK(checkArgs(call, comm, one, one, count, datatype, stream, what));
  TERN_CHECK(checkRank(comm, root, "root", what));
  if (comm->rank == root && count > 0 && !many)
    return setError(ternInvalidArgument, std::string(what) + ": " + manyName + " is NULL on the root");
  return ternSuccess;
}

// The launching calls' bodies; the C entry points below return them through
// groupResult (api/group.h: a failure inside a group fails the group).  Plain
// functions, not lambdas: their enum arguments stay values (a lambda read them
// from memory, which UBSan refuses for the out-of-range values a C caller may pass).
static ternResult_t allReduceCall(const void* sendbuff, void* recvbuff, size_t count,
                           ternDataType_t datatype, ternRedOp_t op, ternComm_t comm,
                           ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, count, datatype, stream, "ternAllReduce"));
  TERN_CHECK(checkOpOrPreMulSum(comm, op, datatype, "ternAllReduce"));
  if (count == 0) return ternSuccess;
  return launch(call, comm, collArgs(OpKind::AllReduce, sendbuff, recvbuff, count, datatype, op), stream);
}

static ternResult_t broadcastCall(const void* sendbuff, void* recvbuff, size_t count,
                           ternDataType_t datatype, int root, ternComm_t comm,
                           ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, recvbuff, recvbuff, count, datatype, stream, "ternBroadcast"));
  TERN_CHECK(checkRank(comm, root, "root", "ternBroadcast"));
  if (comm->rank == root && count > 0 && !sendbuff)
    return setError(ternInvalidArgument, "ternBroadcast: sendbuff is NULL on the root");
  if (count == 0) return ternSuccess;
  return launch(call, comm,
                collArgs(OpKind::Broadcast, sendbuff, recvbuff, count, datatype, ternSum, root),
                stream);
}

static ternResult_t reduceCall(const void* sendbuff, void* recvbuff, size_t count,
                        ternDataType_t datatype, ternRedOp_t op, int root, ternComm_t comm,
                        ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, sendbuff, count, datatype, stream, "ternReduce"));
  TERN_CHECK(checkOpOrPreMulSum(comm, op, datatype, "ternReduce"));
  TERN_CHECK(checkRank(comm, root, "root", "ternReduce"));
  if (comm->rank == root && count > 0 && !recvbuff)
    return setError(ternInvalidArgument, "ternReduce: recvbuff is NULL on the root");
  if (count == 0) return ternSuccess;
  return launch(call, comm, collArgs(OpKind::Reduce, sendbuff, recvbuff, count, datatype, op, root),
                stream);
}

static ternResult_t allGatherCall(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ternDataType_t datatype, ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, sendcount, datatype, stream, "ternAllGather"));
  if (sendcount == 0) return ternSuccess;
  return launch(call, comm, collArgs(OpKind::AllGather, sendbuff, recvbuff, sendcount, datatype), stream);
}

static ternResult_t allToAllCall(const void* sendbuff, void* recvbuff, size_t count,
                          ternDataType_t datatype, ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, count, datatype, stream, "ternAllToAll"));
  if (count == 0) return ternSuccess;
  return launch(call, comm, collArgs(OpKind::AllToAll, sendbuff, recvbuff, count, datatype), stream);
}

static ternResult_t gatherCall(const void* sendbuff, void* recvbuff, size_t count,
                        ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(rootedBlocks(call, sendbuff, recvbuff, count, datatype, root, comm, stream, "ternGather",
                          "recvbuff"));
  if (count == 0) return ternSuccess;
  return launch(call, comm,
                collArgs(OpKind::Gather, sendbuff, recvbuff, count, datatype, ternSum, root), stream);
}

static ternResult_t scatterCall(const void* sendbuff, void* recvbuff, size_t count,
                         ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(rootedBlocks(call, recvbuff, sendbuff, count, datatype, root, comm, stream, "ternScatter",
                          "sendbuff"));
  if (count == 0) return ternSuccess;
  return launch(call, comm,
                collArgs(OpKind::Scatter, sendbuff, recvbuff, count, datatype, ternSum, root), stream);
}

static ternResult_t reduceScatterCall(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ternDataType_t datatype, ternRedOp_t op, ternComm_t comm,
                               ternStream_t stream) {
  InCall call(comm);
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, recvcount, datatype, stream,
                       "ternReduceScatter"));
  TERN_CHECK(checkOpOrPreMulSum(comm, op, datatype, "ternReduceScatter"));
  if (recvcount == 0) return ternSuccess;
  return launch(call, comm,
                collArgs(OpKind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op), stream);
}

static ternResult_t pointToPoint(const void* buf, size_t count, ternDataType_t datatype, int peer,
                                 ternComm_t comm, ternStream_t stream, bool send) {
  InCall call(comm);
  const char* what = send ? "ternSend" : "ternRecv";
  TERN_CHECK(checkArgs(call, comm, buf, buf, count, datatype, stream, what));
  TERN_CHECK(checkRank(comm, peer, "peer", what));
  if (count == 0) return ternSuccess;
  if (peer == comm->rank && !groupOpen())
    return setError(ternInvalidUsage, std::string(what) +
                                          " to self outside a group would wait forever; "
                                          "pair it with its match inside ternGroupStart/End");
  void* b = const_cast<void*>(buf);
  return launch(call, comm, collArgs(send ? OpKind::Send : OpKind::Recv, buf, b, count, datatype,
                               ternSum, peer), stream);
}

static ternResult_t recvAnySourceCall(void* recvbuff, size_t count, ternDataType_t datatype, int* source,
                               ternComm_t comm, ternStream_t stream) {
  InCall call(comm);
  const char* what = "ternRecvAnySource";
  TERN_CHECK(checkArgs(call, comm, recvbuff, recvbuff, count, datatype, stream, what));
  if (!source) return setError(ternInvalidArgument, "ternRecvAnySource: source is NULL");
  if (comm->nranks < 2)
    return setError(ternInvalidUsage,
                    "ternRecvAnySource on a communicator of one rank would wait forever: no other rank "
                    "can send");
  if (count == 0)  // a zero-count send moves nothing: no sender could be named
    return setError(ternInvalidArgument,
                    "ternRecvAnySource: count is 0 (zero-count sends move nothing, so no sender "
                    "could be named)");
  *source = -1;
  CollArgs a = collArgs(OpKind::Recv, recvbuff, recvbuff, count, datatype, ternSum, -1);
  a.source = source;
  return launch(call, comm, a, stream);
}

static ternResult_t allReduceTernaryExCall(const void* sendbuff, void* recvbuff, size_t count,
                                    ternDataType_t datatype, ternRedOp_t op,
                                    const void* tensorHandle, ternComm_t comm,
                                    ternStream_t stream) {
  InCall call(comm);
  const char* what = "ternAllReduceTernary";
  TERN_CHECK(checkArgs(call, comm, sendbuff, recvbuff, count, datatype, stream, what));
  TERN_CHECK(checkOp(comm, op, what));
  if (datatype != ternFloat32 && datatype != ternFloat16 && datatype != ternBfloat16)
    return setError(ternInvalidArgument, std::string(what) +
                                             ": datatype must be float32, float16 or bfloat16, not " +
                                             std::to_string(datatype));
  if (op != ternSum && op != ternAvg)
    return setError(ternInvalidArgument, std::string(what) +
                                             ": op must be ternSum or ternAvg (ternary codes cannot "
                                             "express products, maxima or minima)");
  if (count == 0) return ternSuccess;
  CollArgs args = collArgs(OpKind::Ternary, sendbuff, recvbuff, count, datatype, op);
  return launch(call, comm, args, stream,
                makeTernaryTask(ternaryOf(comm), args, tensorHandle, comm->nranks,
                                currentPriority()));
}

static ternResult_t barrierCall(ternComm_t comm) {
  InCall call(comm);
  TERN_CHECK(checkLiveComm(call, comm));
  if (groupOpen()) return setError(ternInvalidUsage, "ternBarrier cannot be called inside a group");
  return launch(call, comm, collArgs(OpKind::Barrier, nullptr, nullptr, 1, ternInt32));
}

extern "C" {

ternResult_t ternAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ternDataType_t datatype, ternRedOp_t op, ternComm_t comm,
                           ternStream_t stream) {
  return groupResult(allReduceCall(sendbuff, recvbuff, count, datatype, op, comm, stream));
}

ternResult_t ternBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ternDataType_t datatype, int root, ternComm_t comm,
                           ternStream_t stream) {
  return groupResult(broadcastCall(sendbuff, recvbuff, count, datatype, root, comm, stream));
}

ternResult_t ternReduce(const void* sendbuff, void* recvbuff, size_t count,
                        ternDataType_t datatype, ternRedOp_t op, int root, ternComm_t comm,
                        ternStream_t stream) {
  return groupResult(reduceCall(sendbuff, recvbuff, count, datatype, op, root, comm, stream));
}

ternResult_t ternAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ternDataType_t datatype, ternComm_t comm, ternStream_t stream) {
  return groupResult(allGatherCall(sendbuff, recvbuff, sendcount, datatype, comm, stream));
}

ternResult_t ternAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          ternDataType_t datatype, ternComm_t comm, ternStream_t stream) {
  return groupResult(allToAllCall(sendbuff, recvbuff, count, datatype, comm, stream));
}

ternResult_t ternGather(const void* sendbuff, void* recvbuff, size_t count,
                        ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream) {
  return groupResult(gatherCall(sendbuff, recvbuff, count, datatype, root, comm, stream));
}

ternResult_t ternScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ternDataType_t datatype, int root, ternComm_t comm, ternStream_t stream) {
  return groupResult(scatterCall(sendbuff, recvbuff, count, datatype, root, comm, stream));
}

ternResult_t ternReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ternDataType_t datatype, ternRedOp_t op, ternComm_t comm,
                               ternStream_t stream) {
  return groupResult(reduceScatterCall(sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
}

ternResult_t ternSend(const void* sendbuff, size_t count, ternDataType_t datatype, int peer,
                      ternComm_t comm, ternStream_t stream) {
  return groupResult(pointToPoint(sendbuff, count, datatype, peer, comm, stream, true));
}

ternResult_t ternRecv(void* recvbuff, size_t count, ternDataType_t datatype, int peer,
                      ternComm_t comm, ternStream_t stream) {
  return groupResult(pointToPoint(recvbuff, count, datatype, peer, comm, stream, false));
}

ternResult_t ternRecvAnySource(void* recvbuff, size_t count, ternDataType_t datatype, int* source,
                               ternComm_t comm, ternStream_t stream) {
  return groupResult(recvAnySourceCall(recvbuff, count, datatype, source, comm, stream));
}

ternResult_t ternAllReduceTernaryEx(const void* sendbuff, void* recvbuff, size_t count,
                                    ternDataType_t datatype, ternRedOp_t op,
                                    const void* tensorHandle, ternComm_t comm,
                                    ternStream_t stream) {
  return groupResult(allReduceTernaryExCall(sendbuff, recvbuff, count, datatype, op, tensorHandle, comm, stream));
}

ternResult_t ternAllReduceTernary(const void* sendbuff, void* recvbuff, size_t count,
                                  ternDataType_t datatype, ternRedOp_t op, ternComm_t comm,
                                  ternStream_t stream) {
  return ternAllReduceTernaryEx(sendbuff, recvbuff, count, datatype, op, nullptr, comm, stream);
}

ternResult_t ternCommGetTernaryConfig(const ternComm_t comm, ternTernaryConfig_t* config) {
  InCall call(comm);
  if (!config) return setError(ternInvalidArgument, "config is NULL");
  TERN_CHECK(checkLiveComm(call, comm));
  TernaryState& st = ternaryOf(comm);
  std::lock_guard<std::mutex> lk(st.mu);
  *config = st.cfg;
  return ternSuccess;
}

ternResult_t ternCommSetTernaryConfig(ternComm_t comm, const ternTernaryConfig_t* config) {
  InCall call(comm);
  if (!config) return setError(ternInvalidArgument, "config is NULL");
  TERN_CHECK(checkLiveComm(call, comm));
  if (const char* bad = ternaryConfigProblem(*config))
    return setError(ternInvalidArgument, std::string("ternCommSetTernaryConfig: ") + bad);
  if (groupOpen())
    return setError(ternInvalidUsage, "ternCommSetTernaryConfig cannot be called inside a group");
  // Calls issued from now on use it; running ones keep the options they
  // were issued with.
  TernaryState& st = ternaryOf(comm);
  std::lock_guard<std::mutex> lk(st.mu);
  st.cfg = *config;
  return ternSuccess;
}

ternResult_t ternCommReleaseTensor(ternComm_t comm, const void* tensorHandle) {
  InCall call(comm);
  TERN_CHECK(checkLiveComm(call, comm));
  TernaryState& st = ternaryOf(comm);
  std::lock_guard<std::mutex> lk(st.mu);  // a running call keeps its own reference
  st.residuals.erase(tensorHandle);
  return ternSuccess;
}

ternResult_t ternCommGetTernaryStats(const ternComm_t comm, ternTernaryStats_t* stats) {
  InCall call(comm);
  if (!stats) return setError(ternInvalidArgument, "stats is NULL");
  TERN_CHECK(checkLiveComm(call, comm));
  TernaryState& st = ternaryOf(comm);
  std::lock_guard<std::mutex> lk(st.mu);
  *stats = st.stats;
  return ternSuccess;
}

ternResult_t ternBarrier(ternComm_t comm) {
  return groupResult(barrierCall(comm));
}

}  // extern "C"
