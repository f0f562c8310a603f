// sendrecv_perf: every rank sends to rank+1 and receives from rank-1 in one
// group (a ring shift), busbw = algbw.
#include "common.h"
int main(int argc, char** argv) { return ternperf::perfMain(argc, argv, ternperf::kSendRecvTest); }
