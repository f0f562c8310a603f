// all_reduce_perf: ternAllReduce, busbw = algbw * 2(n-1)/n.
#include "common.h"

int main(int argc, char** argv) { return ternperf::perfMain(argc, argv, ternperf::kAllReduceTest); }
