// reduce_scatter_perf: ternReduceScatter, size = total send bytes,
// busbw = algbw * (n-1)/n.  In place: recvbuff = sendbuff + rank * count.
#include "common.h"
int main(int argc, char** argv) { return ternperf::perfMain(argc, argv, ternperf::kReduceScatterTest); }
