// Entry points of the collective algorithms.  Each runs on the progress
// thread, on host buffers, after the API layer validated its arguments.
#pragma once
#include <cstddef>
#include <vector>

#include "core/comm.h"

namespace tern {

// Allreduce: recursive doubling below TERN_SMALL_THRESHOLD bytes (latency),
// pipelined ring above it (bandwidth).
ternResult_t allReduce(Comm& c, const void* src, void* dst, size_t count, ternDataType_t dt,
                       ternRedOp_t op);
ternResult_t allReduceRing(Comm& c, const void* src, void* dst, size_t count,
                           ternDataType_t dt, ternRedOp_t op);
ternResult_t allReduceRecursiveDoubling(Comm& c, const void* src, void* dst, size_t count,
                                        ternDataType_t dt, ternRedOp_t op);
ternResult_t broadcast(Comm& c, const void* src, void* dst, size_t bytes, int root);
ternResult_t reduce(Comm& c, const void* src, void* dst, size_t count, ternDataType_t dt,
                    ternRedOp_t op, int root);
ternResult_t allGather(Comm& c, const void* src, void* dst, size_t bytesPerRank);
ternResult_t reduceScatter(Comm& c, const void* src, void* dst, size_t recvcount,
                           ternDataType_t dt, ternRedOp_t op);
ternResult_t barrier(Comm& c);

// Ternary-compressed allreduce (allreduce_ternary.cc); falls back to allReduce
// where compression does not pay.  `handle` keys the error-feedback residual.
ternResult_t allReduceTernary(Comm& c, const void* src, void* dst, size_t count,
                              ternDataType_t dt, ternRedOp_t op, const void* handle);

// Point-to-point: every transfer of a group is driven at once, so matched
// send/recv pairs never deadlock, whatever their order in the group.
struct P2P {
  int peer;
  bool send;
  char* buf;
  size_t bytes;
};
ternResult_t sendRecv(Comm& c, const std::vector<P2P>& ops);

}  // namespace tern
