// mpi_allreduce_perf: the all_reduce table measured over MPI_Allreduce
// (Debian's OpenMPI), for side-by-side comparison with tern.  Same flags.
#include <mpi.h>

#include "common.h"

using namespace ternperf;

namespace {

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

}  // namespace

int main(int argc, char** argv) {
  MpiBackend mpi(&argc, &argv);
  return perfMain(argc, argv, kAllReduceTest, &mpi);
}
