// MpiBackend: the perf harness's Backend over Debian's OpenMPI
// (MPI_Allreduce, MPI_Alltoall), for side-by-side comparison with tern.
#pragma once
#include <mpi.h>

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
  bool allReduce(const void* s, void* r, size_t n, ternDataType_t dt, ternRedOp_t op) override {
    MPI_Datatype t = type(dt);
    MPI_Op o = op == ternSum ? MPI_SUM : op == ternProd ? MPI_PROD : op == ternMax ? MPI_MAX
             : op == ternMin ? MPI_MIN : MPI_OP_NULL;
    if (t == MPI_DATATYPE_NULL || o == MPI_OP_NULL) {
      err_ = "datatype or op not supported by MPI_Allreduce";
      return false;
    }
    return MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, static_cast<int>(n), t, o,
                         MPI_COMM_WORLD) == MPI_SUCCESS;
  }
  bool allToAll(const void* s, void* r, size_t n, ternDataType_t dt) override {
    MPI_Datatype t = type(dt);
    if (t == MPI_DATATYPE_NULL) {
      err_ = "datatype not supported by MPI_Alltoall";
      return false;
    }
    int c = static_cast<int>(n);
    return MPI_Alltoall(s == r ? MPI_IN_PLACE : s, c, t, r, c, t, MPI_COMM_WORLD) == MPI_SUCCESS;
  }
  bool barrier() override { return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS; }
  const char* lastError() const override { return err_; }

 private:
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
