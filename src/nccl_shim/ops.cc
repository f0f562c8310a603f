// Datatypes and reduction ops: NCCL's values onto tern's, and the user ops
// of ncclRedOpCreatePreMulSum (each rank's input times its scalar, summed).
#include <cstring>

#include "codec/half.h"
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
    return fail(comm, ncclInvalidArgument,
                "%s: datatype %s: tern has no 8-bit float arithmetic (the shim reports NCCL 2.23, "
                "before fp8)", what, typeName(t));
  if (t < 0 || t >= ncclFloat8e4m3)
    return fail(comm, ncclInvalidArgument, "%s: datatype %d is not a ncclDataType_t", what, (int)t);
  *out = static_cast<ternDataType_t>(t);
  return ncclSuccess;
}

namespace {

template <class T>
void scaleAs(const void* src, void* dst, size_t n, const void* scalar) {
  T s, x;
  memcpy(&s, scalar, sizeof s);
  for (size_t i = 0; i < n; ++i) {
    memcpy(&x, static_cast<const char*>(src) + i * sizeof x, sizeof x);
    x = static_cast<T>(x * s);
    memcpy(static_cast<char*>(dst) + i * sizeof x, &x, sizeof x);
  }
}

// 16-bit floats: multiplied in float32 and rounded once, as NCCL's kernels do.
template <float (*toF)(unsigned short), unsigned short (*fromF)(float)>
void scale16(const void* src, void* dst, size_t n, const void* scalar) {
  unsigned short s, x;
  memcpy(&s, scalar, 2);
  const float fs = toF(s);
  for (size_t i = 0; i < n; ++i) {
    memcpy(&x, static_cast<const char*>(src) + 2 * i, 2);
    x = fromF(toF(x) * fs);
    memcpy(static_cast<char*>(dst) + 2 * i, &x, 2);
  }
}

}  // namespace

void applyPreMul(const ncclComm::PreMulSum& op, const void* src, void* dst, size_t n) {
  const void* scalar = op.scalarPtr ? op.scalarPtr : op.scalar.data();
  switch (op.dtype) {
    case ncclInt8: return scaleAs<int8_t>(src, dst, n, scalar);
    case ncclUint8: return scaleAs<uint8_t>(src, dst, n, scalar);
    case ncclInt32: return scaleAs<int32_t>(src, dst, n, scalar);
    case ncclUint32: return scaleAs<uint32_t>(src, dst, n, scalar);
    case ncclInt64: return scaleAs<int64_t>(src, dst, n, scalar);
    case ncclUint64: return scaleAs<uint64_t>(src, dst, n, scalar);
    case ncclFloat32: return scaleAs<float>(src, dst, n, scalar);
    case ncclFloat64: return scaleAs<double>(src, dst, n, scalar);
    case ncclFloat16: return scale16<tern::halfToFloat, tern::floatToHalf>(src, dst, n, scalar);
    case ncclBfloat16: return scale16<tern::bf16ToFloat, tern::floatToBf16>(src, dst, n, scalar);
    default: return;  // refused when the op was made
  }
}

ncclResult_t resolveOp(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t dt, OpPlan* plan,
                       const char* what) {
  if (op >= 0 && op < ncclNumOps) {
    plan->op = static_cast<ternRedOp_t>(op);
    plan->scale = false;
    return ncclSuccess;
  }
  std::unique_lock<std::mutex> g(comm->mu);
  auto it = comm->ops.find(static_cast<int>(op));
  const bool found = it != comm->ops.end();
  if (found) plan->pm = it->second;
  g.unlock();
  if (!found)
    return fail(comm, ncclInvalidArgument,
                "%s: op %d is neither a built-in ncclRedOp_t nor a live "
                "ncclRedOpCreatePreMulSum op of this communicator", what, (int)op);
  if (plan->pm.dtype != dt)
    return fail(comm, ncclInvalidArgument, "%s: op %d was made for %s but the call's datatype is %s",
                what, (int)op, typeName(plan->pm.dtype), typeName(dt));
  plan->op = ternSum;
  plan->scale = true;
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
    r = fail(comm, ncclInvalidArgument, "%s: %s is NULL", what, op ? "scalar" : "op");
  if (r == ncclSuccess && residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
    r = fail(comm, ncclInvalidArgument, "%s: residence %d is not a ncclScalarResidence_t", what,
             (int)residence);
  if (r == ncclSuccess) r = checkHostBuffers(comm, what, scalar, nullptr);
  if (r == ncclSuccess) {
    ncclComm::PreMulSum pm{datatype, {}, nullptr};
    if (residence == ncclScalarHostImmediate) {  // read now
      const auto* b = static_cast<const unsigned char*>(scalar);
      pm.scalar.assign(b, b + typeSize(datatype));
    } else {  // read when each collective runs (host path: host memory)
      pm.scalarPtr = scalar;
    }
    std::lock_guard<std::mutex> g(comm->mu);
    *op = static_cast<ncclRedOp_t>(comm->nextOp++);
    comm->ops[*op] = std::move(pm);
  }
  return traced(comm, r, "%s(%s, residence=%d) = %d", what, typeName(datatype), (int)residence,
                op && r == ncclSuccess ? (int)*op : -1);
}

NCCL_SHIM_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  using namespace shim;
  ncclResult_t r = checkComm(comm, "ncclRedOpDestroy");
  if (r == ncclSuccess) {
    std::unique_lock<std::mutex> g(comm->mu);
    size_t erased = comm->ops.erase(static_cast<int>(op));
    g.unlock();
    if (!erased)
      r = fail(comm, ncclInvalidArgument,
               "ncclRedOpDestroy: op %d is not a live ncclRedOpCreatePreMulSum op of this "
               "communicator", (int)op);
  }
  return traced(comm, r, "ncclRedOpDestroy(op=%d)", (int)op);
}
