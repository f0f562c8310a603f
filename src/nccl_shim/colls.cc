// The collectives and send/recv: arguments checked when called (inside a
// group too, as NCCL does), then tern's call now or at the group's end.
#include "nccl_shim/shim.h"

using namespace shim;

namespace {

// What every data call shares: a ready comm, a tern datatype, and the
// stream tern gets.
struct Call {
  const char* what;
  ncclComm_t comm;
  ternDataType_t type = ternFloat32;
  ternStream_t stream = nullptr;
};

// CUDA's legacy default stream: what NCCL runs on for a NULL stream.
const ternStream_t kLegacyStream = reinterpret_cast<ternStream_t>(0x1);

// A stream goes to tern as it is: tern runs device buffers on it, and says
// why not where it cannot (a build or machine without CUDA, host buffers
// with a stream).  A NULL stream means host buffers to tern, so device
// buffers with a NULL stream go on CUDA's legacy default stream, as NCCL's do.
ncclResult_t prepare(Call* c, ncclDataType_t dt, cudaStream_t stream, const void* buf,
                     const void* buf2) {
  if (ncclResult_t r = checkComm(c->comm, c->what)) return r;
  if (ncclResult_t r = toTernType(c->comm, dt, &c->type, c->what)) return r;
  c->stream = stream;
  if (!stream && deviceBuffers(buf, buf2))
    c->stream = kLegacyStream;
  return ncclSuccess;
}

ncclResult_t checkRoot(const Call& c, int root, const char* role) {
  if (root < 0 || root >= c.comm->nranks)
    return fail(ncclInvalidArgument, "%s: %s %d is not in [0, %d)", c.what, role, root, c.comm->nranks);
  return ncclSuccess;
}

// A reducing collective: `reduce(top)` runs tern's call with tern's op (a
// PreMulSum op is tern's too: it scales each input on the host or, for
// device buffers, as a kernel on the operation's stream).
ncclResult_t reducing(Call& c, ncclDataType_t dt, ncclRedOp_t op,
                      std::function<ternResult_t(ternRedOp_t)> reduce) {
  ternRedOp_t top;
  if (ncclResult_t r = resolveOp(c.comm, op, dt, &top, c.what)) return r;
  return submit(c.comm, [=] { return reduce(top); });
}

}  // namespace

NCCL_SHIM_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Call c{"ncclAllReduce", comm};
  ncclResult_t r = prepare(&c, datatype, stream, sendbuff, recvbuff);
  if (r == ncclSuccess)
    r = reducing(c, datatype, op, [=](ternRedOp_t top) {
      return ternAllReduce(sendbuff, recvbuff, count, c.type, top, comm->tern, c.stream);
    });
  return traced(comm, r, "%s(count=%zu, %s, %s)", c.what, count, typeName(datatype), opName(op));
}

NCCL_SHIM_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
              cudaStream_t stream) {
  Call c{"ncclReduce", comm};
  ncclResult_t r = prepare(&c, datatype, stream, sendbuff, recvbuff);
  if (r == ncclSuccess) r = checkRoot(c, root, "root");
  if (r == ncclSuccess)
    r = reducing(c, datatype, op, [=](ternRedOp_t top) {
      return ternReduce(sendbuff, recvbuff, count, c.type, top, root, comm->tern, c.stream);
    });
  return traced(comm, r, "%s(count=%zu, %s, %s, root=%d)", c.what, count, typeName(datatype),
                opName(op), root);
}

NCCL_SHIM_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff,
              size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
              cudaStream_t stream) {
  Call c{"ncclReduceScatter", comm};
  ncclResult_t r = prepare(&c, datatype, stream, sendbuff, recvbuff);
  if (r == ncclSuccess)
    r = reducing(c, datatype, op, [=](ternRedOp_t top) {
      return ternReduceScatter(sendbuff, recvbuff, recvcount, c.type, top, comm->tern, c.stream);
    });
  return traced(comm, r, "%s(recvcount=%zu, %s, %s)", c.what, recvcount, typeName(datatype),
                opName(op));
}

NCCL_SHIM_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  Call c{"ncclBroadcast", comm};
  ncclResult_t r = prepare(&c, datatype, stream, sendbuff, recvbuff);
  if (r == ncclSuccess) r = checkRoot(c, root, "root");
  if (r == ncclSuccess)
    r = submit(comm, [=] {
      return ternBroadcast(sendbuff, recvbuff, count, c.type, root, comm->tern, c.stream);
    });
  return traced(comm, r, "%s(count=%zu, %s, root=%d)", c.what, count, typeName(datatype), root);
}

NCCL_SHIM_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

// AllGather, AlltoAll: count elements per rank, no root, no op.
static ncclResult_t blocks(const char* what, const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                           ternResult_t (*fn)(const void*, void*, size_t, ternDataType_t,
                                              ternComm_t, ternStream_t)) {
  Call c{what, comm};
  ncclResult_t r = prepare(&c, datatype, stream, sendbuff, recvbuff);
  if (r == ncclSuccess)
    r = submit(comm, [=] { return fn(sendbuff, recvbuff, count, c.type, comm->tern, c.stream); });
  return traced(comm, r, "%s(count=%zu, %s)", what, count, typeName(datatype));
}

NCCL_SHIM_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return blocks("ncclAllGather", sendbuff, recvbuff, sendcount, datatype, comm, stream,
                ternAllGather);
}

NCCL_SHIM_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return blocks("ncclAlltoAll", sendbuff, recvbuff, count, datatype, comm, stream, ternAllToAll);
}

// Gather, Scatter: count elements per rank to / from a root.
static ncclResult_t rooted(const char* what, const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
                           ternResult_t (*fn)(const void*, void*, size_t, ternDataType_t, int,
                                              ternComm_t, ternStream_t)) {
  Call c{what, comm};
  ncclResult_t r = prepare(&c, datatype, stream, sendbuff, recvbuff);
  if (r == ncclSuccess) r = checkRoot(c, root, "root");
  if (r == ncclSuccess)
    r = submit(comm,
               [=] { return fn(sendbuff, recvbuff, count, c.type, root, comm->tern, c.stream); });
  return traced(comm, r, "%s(count=%zu, %s, root=%d)", what, count, typeName(datatype), root);
}

NCCL_SHIM_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return rooted("ncclGather", sendbuff, recvbuff, count, datatype, root, comm, stream, ternGather);
}

NCCL_SHIM_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return rooted("ncclScatter", sendbuff, recvbuff, count, datatype, root, comm, stream, ternScatter);
}

// Send and Recv: one buffer, one peer.
static ncclResult_t pointToPoint(const char* what, void* buf, size_t count, ncclDataType_t datatype,
                                 int peer, ncclComm_t comm, cudaStream_t stream, bool send) {
  Call c{what, comm};
  ncclResult_t r = prepare(&c, datatype, stream, buf, nullptr);
  if (r == ncclSuccess) r = checkRoot(c, peer, "peer");
  if (r == ncclSuccess)
    r = submit(comm, [=] {
      return send ? ternSend(buf, count, c.type, peer, comm->tern, c.stream)
                  : ternRecv(buf, count, c.type, peer, comm->tern, c.stream);
    });
  return traced(comm, r, "%s(count=%zu, %s, peer=%d)", what, count, typeName(datatype), peer);
}

NCCL_SHIM_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclComm_t comm, cudaStream_t stream) {
  // tern only reads a send buffer; the cast serves the shared helper.
  return pointToPoint("ncclSend", const_cast<void*>(sendbuff), count, datatype, peer, comm, stream,
                      true);
}

NCCL_SHIM_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclComm_t comm, cudaStream_t stream) {
  return pointToPoint("ncclRecv", recvbuff, count, datatype, peer, comm, stream, false);
}
