// MpiBackend: the perf harness's Backend over MPI (Debian's OpenMPI, or
// MPICH when built with its wrapper), every collective with tern's meaning of
// the arguments, for perf/compare's side-by-side tables.  In place as tern
// defines it maps onto MPI_IN_PLACE where MPI's layout is the same, else
// onto the nearest MPI form plus the move that tern's layout needs.
#pragma once
#include <mpi.h>

#include <cstring>

#include "common.h"

namespace ternperf {

class MpiBackend : public Backend {
 public:
  MpiBackend(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiBackend() override { MPI_Finalize(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return "mpi"; }
  void* allocComm(size_t bytes) override {
    void* p = nullptr;
    return MPI_Alloc_mem(static_cast<MPI_Aint>(bytes), MPI_INFO_NULL, &p) == MPI_SUCCESS ? p : nullptr;
  }
  bool allReduce(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op) override {
    MPI_Datatype t;
    MPI_Op o;
    if (!typeAndOp(dt, op, &t, &o)) return false;
    return ok(MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, c(n), t, o, MPI_COMM_WORLD));
  }
  bool allToAll(const void* s, void* r, size_t n, ternDataType_t dt) override {
    MPI_Datatype t;
    if (!typeOf(dt, &t)) return false;
    return ok(MPI_Alltoall(s == r ? MPI_IN_PLACE : s, c(n), t, r, c(n), t, MPI_COMM_WORLD));
  }
  bool allGather(const void* s, void* r, size_t n, ternDataType_t dt) override {
    MPI_Datatype t;
    if (!typeOf(dt, &t)) return false;
    bool inPlace = s == static_cast<char*>(r) + rank_ * n * size(dt);
    return ok(MPI_Allgather(inPlace ? MPI_IN_PLACE : s, c(n), t, r, c(n), t, MPI_COMM_WORLD));
  }
  // tern's in place leaves this rank's block at sendbuff + rank * count;
  // MPI's leaves it at the start of the buffer: one move after.
  bool reduceScatter(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op) override {
    MPI_Datatype t;
    MPI_Op o;
    if (!typeAndOp(dt, op, &t, &o)) return false;
    char* base = const_cast<char*>(static_cast<const char*>(s));
    if (r != base + rank_ * n * size(dt))
      return ok(MPI_Reduce_scatter_block(s, r, c(n), t, o, MPI_COMM_WORLD));
    if (!ok(MPI_Reduce_scatter_block(MPI_IN_PLACE, base, c(n), t, o, MPI_COMM_WORLD))) return false;
    memmove(r, base, n * size(dt));
    return true;
  }
  // tern's root has the data in recvbuff too: MPI's root broadcasts from
  // sendbuff and copies it there (the same work a user of MPI does for
  // these semantics).
  bool broadcast(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    MPI_Datatype t;
    if (!typeOf(dt, &t)) return false;
    void* buf = rank_ == root ? const_cast<void*>(s) : r;
    if (!ok(MPI_Bcast(buf, c(n), t, root, MPI_COMM_WORLD))) return false;
    if (rank_ == root && s != r) memcpy(r, s, n * size(dt));
    return true;
  }
  bool reduce(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op, int root) override {
    MPI_Datatype t;
    MPI_Op o;
    if (!typeAndOp(dt, op, &t, &o)) return false;
    const void* in = rank_ == root && s == r ? MPI_IN_PLACE : s;
    return ok(MPI_Reduce(in, r, c(n), t, o, root, MPI_COMM_WORLD));
  }
  bool gather(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    MPI_Datatype t;
    if (!typeOf(dt, &t)) return false;
    bool inPlace = rank_ == root && s == static_cast<char*>(r) + root * n * size(dt);
    return ok(MPI_Gather(inPlace ? MPI_IN_PLACE : s, c(n), t, r, c(n), t, root, MPI_COMM_WORLD));
  }
  bool scatter(const void* s, void* r, size_t n, ternDataType_t dt, int root) override {
    MPI_Datatype t;
    if (!typeOf(dt, &t)) return false;
    bool inPlace = rank_ == root && r == static_cast<const char*>(s) + root * n * size(dt);
    return ok(MPI_Scatter(s, c(n), t, inPlace ? MPI_IN_PLACE : r, c(n), t, root, MPI_COMM_WORLD));
  }
  bool sendRecv(const void* s, void* r, size_t n, ternDataType_t dt) override {
    MPI_Datatype t;
    if (!typeOf(dt, &t)) return false;
    int to = (rank_ + 1) % size_, from = (rank_ + size_ - 1) % size_;
    if (s == r)
      return ok(MPI_Sendrecv_replace(r, c(n), t, to, 0, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return ok(MPI_Sendrecv(s, c(n), t, to, 0, r, c(n), t, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  }
  bool barrier() override { return ok(MPI_Barrier(MPI_COMM_WORLD)); }
  const char* lastError() const override { return lacking_[0] ? lacking_ : err_; }

 private:
  static int c(size_t n) { return static_cast<int>(n); }
  static size_t size(ternDataType_t dt) {
    int b = 0;
    MPI_Type_size(type(dt), &b);
    return static_cast<size_t>(b);
  }
  bool ok(int rc) {
    if (rc != MPI_SUCCESS) err_ = "an MPI call failed";
    return rc == MPI_SUCCESS;
  }
  bool typeOf(ternDataType_t dt, MPI_Datatype* t) {
    *t = type(dt);
    if (*t == MPI_DATATYPE_NULL) err_ = "datatype not supported by MPI";
    return *t != MPI_DATATYPE_NULL;
  }
  bool typeAndOp(ternDataType_t dt, ternRedOp_t op, MPI_Datatype* t, MPI_Op* o) {
    *o = op == ternSum ? MPI_SUM : op == ternProd ? MPI_PROD : op == ternMax ? MPI_MAX
       : op == ternMin ? MPI_MIN : MPI_OP_NULL;
    if (*o == MPI_OP_NULL) err_ = "op not supported by MPI (no average)";
    return typeOf(dt, t) && *o != MPI_OP_NULL;
  }
  static MPI_Datatype type(ternDataType_t dt) {
    switch (dt) {
      case ternInt8: return MPI_INT8_T;
      case ternUint8: return MPI_UINT8_T;
      case ternInt32: return MPI_INT32_T;
      case ternUint32: return MPI_UINT32_T;
      case ternInt64: return MPI_INT64_T;
      case ternUint64: return MPI_UINT64_T;
      case ternFloat32: return MPI_FLOAT;
      case ternFloat64: return MPI_DOUBLE;
      default: return MPI_DATATYPE_NULL;
    }
  }
  int rank_ = 0, size_ = 1;
  const char* err_ = "MPI error";
};

}  // namespace ternperf
