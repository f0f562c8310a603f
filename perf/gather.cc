// gather_perf: ternGather, busbw = algbw * (n-1)/n (harness/alltoall_test.cc).
#include "common.h"

int main(int argc, char** argv) { return ternperf::perfMain(argc, argv, ternperf::kGatherTest); }
