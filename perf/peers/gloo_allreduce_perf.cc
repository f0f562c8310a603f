// gloo_allreduce_perf: the allreduce table measured over Gloo, same flags as tern's.
#include "gloo_backend.h"

int main(int argc, char** argv) {
  ternperf::GlooBackend gloo;
  return ternperf::perfMain(argc, argv, ternperf::kAllReduceTest, &gloo);
}
