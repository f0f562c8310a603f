// nccl_shim_overhead: what the NCCL ABI adds to a call.  One process, a
// one-rank communicator (no peer to wait for), the same 8-byte allreduce
// issued through ternAllReduce and through the shim's ncclAllReduce, in
// alternating blocks; prints each path's median and fastest per-call time
// over the blocks (the fastest is the least disturbed on a shared host).
//   nccl_shim_overhead [blocks=40] [calls per block=2000]
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.h"

int main(int argc, char** argv) {
  int blocks = argc > 1 ? atoi(argv[1]) : 40, calls = argc > 2 ? atoi(argv[2]) : 2000;
  ternUniqueId tid;
  ncclUniqueId nid;
  ternComm_t tern = nullptr;
  ncclComm_t nccl = nullptr;
  if (ternGetUniqueId(&tid) || ternCommInitRank(&tern, 1, tid, 0) || ncclGetUniqueId(&nid) ||
      ncclCommInitRank(&nccl, 1, nid, 0)) {
    fprintf(stderr, "init failed: %s / %s\n", ternGetLastError(nullptr), ncclGetLastError(nullptr));
    return 1;
  }
  float x[2] = {1, 2}, y[2];
  std::vector<double> viaTern, viaShim;
  for (int b = 0; b < blocks; ++b) {
    double t0 = ternperf::now();
    for (int i = 0; i < calls; ++i)
      if (ternAllReduce(x, y, 2, ternFloat32, ternSum, tern, nullptr)) return 1;
    double t1 = ternperf::now();
    for (int i = 0; i < calls; ++i)
      if (ncclAllReduce(x, y, 2, ncclFloat32, ncclSum, nccl, nullptr)) return 1;
    double t2 = ternperf::now();
    viaTern.push_back((t1 - t0) / calls * 1e6);
    viaShim.push_back((t2 - t1) / calls * 1e6);
  }
  auto report = [](const char* name, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    printf("%-22s median %7.2f us  fastest %7.2f us  slowest %7.2f us\n", name, v[v.size() / 2],
           v.front(), v.back());
    return v[v.size() / 2];
  };
  double t = report("ternAllReduce", viaTern), s = report("ncclAllReduce (shim)", viaShim);
  printf("shim adds %.2f us per call (median of %d blocks of %d calls, 8 bytes, 1 rank)\n", s - t,
         blocks, calls);
  ncclCommDestroy(nccl);
  ternCommDestroy(tern);
  return 0;
}
