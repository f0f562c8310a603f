// mpi_<coll>_perf: one collective's table measured over MPI, same flags and
// checks as tern's <coll>_perf (TERN_PERF_COLL names the test; one binary per
// collective, as nccl-tests).
#include <cstdio>

#include "mpi_backend.h"

int main(int argc, char** argv) {
  ternperf::MpiBackend mpi(&argc, &argv);
  const ternperf::CollTest* t = ternperf::collTestByName(TERN_PERF_COLL);
  if (!t) return fprintf(stderr, "no test named %s\n", TERN_PERF_COLL), 2;
  return ternperf::perfMain(argc, argv, *t, &mpi);
}
