// gloo_<coll>_perf: one collective's table measured over Gloo (tcp), same flags and
// checks as tern's <coll>_perf (kPerfColl, linked beside this main, names the
// test; one binary per collective, as nccl-tests).
#include <cstdio>

#include "gloo_backend.h"

extern const char kPerfColl[];

int main(int argc, char** argv) {
  ternperf::GlooBackend gloo;
  const ternperf::CollTest* t = ternperf::collTestByName(kPerfColl);
  if (!t) return fprintf(stderr, "no test named %s\n", kPerfColl), 2;
  return ternperf::perfMain(argc, argv, *t, &gloo);
}
