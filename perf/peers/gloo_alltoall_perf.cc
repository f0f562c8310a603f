// gloo_alltoall_perf: the alltoall table measured over Gloo, same flags as tern's.
#include "gloo_backend.h"

int main(int argc, char** argv) {
  ternperf::GlooBackend gloo;
  return ternperf::perfMain(argc, argv, ternperf::kAllToAllTest, &gloo);
}
