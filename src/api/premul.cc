// PreMulSum ops: NCCL's ncclRedOpCreatePreMulSum in tern (tern.h).  An op
// is a record on its communicator (its datatype and scalar); an operation
// that uses one runs as ternSum over scaled inputs: the scaling (ctx.mem's
// scale(), a kernel on the operation's stream for device buffers) runs when
// the operation starts, into the operation's own buffer, before its plan's
// first step reads it.  NCCL fuses the multiply into its first reduction;
// here it is one pass of its own over the input.
#include "api/premul.h"

#include <cstring>
#include <map>
#include <mutex>

#include "api/group.h"
#include "base/dtype.h"
#include "base/error.h"
#include "memory/buffer_kind.h"
#include "memory/scratch_pool.h"

namespace tern {

namespace {

struct PreMulSumOp {
  ternDataType_t dt;
  ternScalarResidence_t residence;
  unsigned char value[8];  // ternScalarHostImmediate: the scalar, read at creation
  const void* ptr;         // ternScalarDevice: read when each operation starts
  MemType kind;            // where ptr points
};

// A communicator's ops (its attachment: src/comm knows nothing of them).
struct PreMulSumOps {
  std::mutex mu;
  std::map<int, PreMulSumOp> ops;
  int next = ternNumOps;
};

PreMulSumOps& opsOf(Comm* c) {
  return c->attached.getOrMake<PreMulSumOps>([] { return std::make_shared<PreMulSumOps>(); });
}

bool find(Comm* c, ternRedOp_t op, PreMulSumOp* out) {
  PreMulSumOps& t = opsOf(c);
  std::lock_guard<std::mutex> lk(t.mu);
  auto it = t.ops.find(static_cast<int>(op));
  if (it == t.ops.end()) return false;
  *out = it->second;
  return true;
}

// Host scaled inputs, kept between operations (a training step scales the
// same sizes each time: no fresh pages per call).
ScratchPool<unsigned char>& hostScratch() {
  static ScratchPool<unsigned char>* pool = new ScratchPool<unsigned char>;  // never freed
  return *pool;
}

std::shared_ptr<void> borrowHost(size_t bytes, void** p) {
  auto v = std::shared_ptr<std::vector<unsigned char>>(
      new std::vector<unsigned char>(hostScratch().borrow(bytes)),
      [](std::vector<unsigned char>* x) {
        hostScratch().giveBack(std::move(*x));
        delete x;
      });
  *p = v->data();
  return v;
}

size_t inputCount(const CollArgs& a, int nranks) {
  return a.kind == OpKind::ReduceScatter ? a.count * static_cast<size_t>(nranks) : a.count;
}

}  // namespace

bool isPreMulSum(Comm* c, ternRedOp_t op, ternDataType_t* dt) {
  PreMulSumOp o;
  if (static_cast<int>(op) < ternNumOps || !find(c, op, &o)) return false;
  *dt = o.dt;
  return true;
}

ternResult_t setUpPreMulSum(Comm* c, CollArgs* args, Operation& op, std::string* why) {
  PreMulSumOp o;
  if (!find(c, args->op, &o)) {
    *why = "op " + std::to_string(args->op) + " was destroyed during the call";
    return ternInvalidArgument;
  }
  Operation::PreMul& pm = op.premul;
  const MemOps* dev = op.streamMem.get();
  if (!dev && o.residence == ternScalarDevice && o.kind != MemType::Host) {
    *why = "the PreMulSum op's scalar is device memory but the buffers are host memory (stream "
           "NULL): the host cannot read it";
    return ternInvalidArgument;
  }
  pm.count = inputCount(*args, c->nranks);
  pm.dt = args->dt;
  pm.src = args->src;
  memcpy(pm.value, o.value, sizeof pm.value);
  pm.scalar = o.residence == ternScalarDevice ? o.ptr : pm.value;
  const size_t bytes = pm.count * typeSize(args->dt);
  pm.scaled = dev ? dev->scratch(bytes) : nullptr;
  if (!dev) pm.keep = borrowHost(bytes, &pm.scaled);
  if (!pm.scaled) {
    *why = "no device memory for the scaled input (" + std::to_string(bytes) + " bytes)";
    return dev && dev->error() != ternSuccess ? dev->error() : ternSystemError;
  }
  args->src = pm.scaled;
  args->op = ternSum;
  return ternSuccess;
}

}  // namespace tern

using namespace tern;

extern "C" {

ternResult_t ternRedOpCreatePreMulSum(ternRedOp_t* op, void* scalar, ternDataType_t datatype,
                                      ternScalarResidence_t residence, ternComm_t comm) {
  const std::string what = "ternRedOpCreatePreMulSum: ";
  InCall call(comm);
  TERN_CHECK(checkLiveComm(call, comm));
  if (!op || !scalar) return setError(ternInvalidArgument, what + (op ? "scalar" : "op") + " is NULL");
  if (static_cast<int>(datatype) < 0 || datatype >= ternNumTypes)
    return setError(ternInvalidArgument,
                    what + "datatype " + std::to_string(datatype) + " is not a ternDataType_t");
  if (residence != ternScalarDevice && residence != ternScalarHostImmediate)
    return setError(ternInvalidArgument,
                    what + "residence " + std::to_string(residence) + " is not a ternScalarResidence_t");
  int device = -1;
  PreMulSumOp o{datatype, residence, {}, nullptr, bufferKind(scalar, &device)};
  if (residence == ternScalarHostImmediate) {
    if (o.kind != MemType::Host)
      return setError(ternInvalidArgument,
                      what + "a ternScalarHostImmediate scalar must be host memory (this one is " +
                          memKindWords(o.kind) + ": use ternScalarDevice)");
    memcpy(o.value, scalar, typeSize(datatype));
  } else {
    o.ptr = scalar;
  }
  PreMulSumOps& t = opsOf(comm);
  std::lock_guard<std::mutex> lk(t.mu);
  *op = static_cast<ternRedOp_t>(t.next++);
  t.ops[*op] = o;
  return ternSuccess;
}

ternResult_t ternRedOpDestroy(ternRedOp_t op, ternComm_t comm) {
  InCall call(comm);
  TERN_CHECK(checkLiveComm(call, comm));
  PreMulSumOps& t = opsOf(comm);
  std::unique_lock<std::mutex> lk(t.mu);
  const size_t erased = t.ops.erase(static_cast<int>(op));
  lk.unlock();
  if (!erased)
    return setError(ternInvalidArgument,
                    "ternRedOpDestroy: op " + std::to_string(op) +
                        " is not a live ternRedOpCreatePreMulSum op of this communicator");
  return ternSuccess;
}

}  // extern "C"
