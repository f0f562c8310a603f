// The perf harness, after nccl-tests' common.cu: same flags, same table,
// same busbw factors.  Each *_perf binary describes its collective in a
// CollTest and calls perfMain().
#pragma once
#include <cstddef>

#include "tern/tern.h"

namespace ternperf {

struct Sizes {
  size_t sendElems, recvElems;  // buffer sizes (elements) per rank
  size_t count;                 // the "count" column and the call's count argument
  size_t sendInplaceOffset;     // in-place: sendbuff = recvbuff + this many elements
  size_t recvInplaceOffset;     // in-place: recvbuff = recvbuff + this many elements
};

struct CollTest {
  const char* name;
  bool hasOp, hasRoot;
  // Buffer sizes for a message of `bytes` bytes of `esz`-byte elements.
  Sizes (*sizes)(size_t bytes, size_t esz, int nranks, int rank);
  double (*busFactor)(int nranks);
  ternResult_t (*run)(const void* send, void* recv, size_t count, ternDataType_t dt,
                      ternRedOp_t op, int root, ternComm_t comm);
  // Fills this rank's send buffer with verifiable values.
  void (*fill)(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int root,
               int rank, int nranks);
  // Counts wrong elements of this rank's recv buffer.
  size_t (*check)(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int root,
                  int rank, int nranks);
};

int perfMain(int argc, char** argv, const CollTest& t);

}  // namespace ternperf
