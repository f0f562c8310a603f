// reduce_perf: ternReduce to -r root, busbw = algbw.
#include "common.h"
int main(int argc, char** argv) { return ternperf::perfMain(argc, argv, ternperf::kReduceTest); }
