// all_gather_perf: ternAllGather, size = total gathered bytes,
// busbw = algbw * (n-1)/n.  In place: sendbuff = recvbuff + rank * count.
#include "common.h"
int main(int argc, char** argv) { return ternperf::perfMain(argc, argv, ternperf::kAllGatherTest); }
