// mpi_alltoall_perf: the alltoall table measured over OpenMPI, same flags as tern's.
#include "mpi_backend.h"

int main(int argc, char** argv) {
  ternperf::MpiBackend mpi(&argc, &argv);
  return ternperf::perfMain(argc, argv, ternperf::kAllToAllTest, &mpi);
}
