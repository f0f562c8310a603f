// broadcast_perf: ternBroadcast from -r root, busbw = algbw.
#include "common.h"
int main(int argc, char** argv) { return ternperf::perfMain(argc, argv, ternperf::kBroadcastTest); }
