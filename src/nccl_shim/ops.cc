// Datatypes and reduction ops: NCCL's values onto tern's, and the user ops
// of ncclRedOpCreatePreMulSum onto tern's PreMulSum ops (each rank's input
// times its scalar, summed; tern scales on the host or on the stream).
#include "nccl_shim/shim.h"

// The values tern shares with NCCL are the same numbers; a table keeps that explicit.
static_assert(ncclInt8 == (int)ternInt8 && ncclBfloat16 == (int)ternBfloat16 &&
                  ncclFloat32 == (int)ternFloat32 && ncclFloat16 == (int)ternFloat16,
              "tern's datatypes follow NCCL's numbering");
static_assert(ncclSum == (int)ternSum && ncclAvg == (int)ternAvg && ncclNumOps == (int)ternNumOps,
              "tern's built-in ops follow NCCL's numbering");

namespace shim {

const char* typeName(ncclDataType_t t) {
  static const char* names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",    "uint64",
                                "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return (t >= 0 && t < ncclNumTypes) ? names[t] : "invalid-type";
}

const char* opName(ncclRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return (op >= 0 && op < ncclNumOps) ? names[op] : op > 0 ? "user-op" : "invalid-op";
}

size_t typeSize(ncclDataType_t t) {
  if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2) return 1;
  return ternTypeSize(static_cast<ternDataType_t>(t));
}

ncclResult_t toTernType(ncclComm_t comm, ncclDataType_t t, ternDataType_t* out, const char* what) {
  if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2)
    return fail(ncclInvalidArgument,
                "%s: datatype %s: tern has no 8-bit float arithmetic (the shim reports NCCL 2.23, "
                "before fp8)",
                what, typeName(t));
  if (t < 0 || t >= ncclFloat8e4m3)
    return fail(ncclInvalidArgument, "%s: datatype %d is not a ncclDataType_t", what, (int)t);
  *out = static_cast<ternDataType_t>(t);
  return ncclSuccess;
}

ncclResult_t resolveOp(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t dt, ternRedOp_t* out,
                       const char* what) {
  if (op >= 0 && op < ncclNumOps) {
    *out = static_cast<ternRedOp_t>(op);
    return ncclSuccess;
  }
  std::unique_lock<std::mutex> g(comm->mu);
  auto it = comm->ops.find(static_cast<int>(op));
  const bool found = it != comm->ops.end();
  ncclComm::PreMulSum pm;
  if (found) pm = it->second;
  g.unlock();
  if (!found)
    return fail(ncclInvalidArgument,
                "%s: op %d is neither a built-in ncclRedOp_t nor a live "
                "ncclRedOpCreatePreMulSum op of this communicator",
                what, (int)op);
  if (pm.dtype != dt)
    return fail(ncclInvalidArgument, "%s: op %d was made for %s but the call's datatype is %s", what, (int)op,
                typeName(pm.dtype), typeName(dt));
  *out = pm.ternOp;
  return ncclSuccess;
}

}  // namespace shim

NCCL_SHIM_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar,
              ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  using namespace shim;
  const char* what = "ncclRedOpCreatePreMulSum";
  ncclResult_t r = checkComm(comm, what);
  ternDataType_t unused;
  if (r == ncclSuccess) r = toTernType(comm, datatype, &unused, what);
  if (r == ncclSuccess && (!op || !scalar))
    r = fail(ncclInvalidArgument, "%s: %s is NULL", what, op ? "scalar" : "op");
  if (r == ncclSuccess && residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
    r = fail(ncclInvalidArgument, "%s: residence %d is not a ncclScalarResidence_t", what, (int)residence);
  // A host-immediate scalar is read now, on the host (a device scalar is
  // read when each operation runs: on its stream for device buffers).
  if (r == ncclSuccess && residence == ncclScalarHostImmediate && deviceBuffers(scalar, nullptr))
    r = fail(ncclInvalidArgument,
             "%s: a ncclScalarHostImmediate scalar is read on the host now, but this one is CUDA "
             "device memory (use ncclScalarDevice)",
             what);
  ncclComm::PreMulSum pm{datatype, ternSum};
  if (r == ncclSuccess)
    r = fromTern(comm, ternRedOpCreatePreMulSum(&pm.ternOp, scalar,
                                                static_cast<ternDataType_t>(datatype),
                                                residence == ncclScalarDevice
                                                    ? ternScalarDevice
                                                    : ternScalarHostImmediate,
                                                comm->tern));
  if (r == ncclSuccess) {
    std::lock_guard<std::mutex> g(comm->mu);
    *op = static_cast<ncclRedOp_t>(comm->nextOp++);
    comm->ops[*op] = pm;
  }
  return traced(comm, r, "%s(%s, residence=%d) = %d", what, typeName(datatype), (int)residence,
                op && r == ncclSuccess ? (int)*op : -1);
}

NCCL_SHIM_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  using namespace shim;
  ncclResult_t r = checkComm(comm, "ncclRedOpDestroy");
  if (r == ncclSuccess) {
    std::unique_lock<std::mutex> g(comm->mu);
    auto it = comm->ops.find(static_cast<int>(op));
    const bool found = it != comm->ops.end();
    const ternRedOp_t top = found ? it->second.ternOp : ternSum;
    if (found) comm->ops.erase(it);
    g.unlock();
    if (found) r = fromTern(comm, ternRedOpDestroy(top, comm->tern));
    else
      r = fail(ncclInvalidArgument,
               "ncclRedOpDestroy: op %d is not a live ncclRedOpCreatePreMulSum op of this "
               "communicator",
               (int)op);
  }
  return traced(comm, r, "ncclRedOpDestroy(op=%d)", (int)op);
}
