// gloo_<coll>_perf: one collective's table measured over Gloo (tcp), same flags and
// checks as tern's <coll>_perf (TERN_PERF_COLL names the test; one binary per
// collective, as nccl-tests).
#include <cstdio>

#include "gloo_backend.h"

int main(int argc, char** argv) {
  ternperf::GlooBackend gloo;
  const ternperf::CollTest* t = ternperf::collTestByName(TERN_PERF_COLL);
  if (!t) return fprintf(stderr, "no test named %s\n", TERN_PERF_COLL), 2;
  return ternperf::perfMain(argc, argv, *t, &gloo);
}
