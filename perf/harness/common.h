// The perf harness, after nccl-tests' common.cu: same flags, same table,
// same busbw factors.  Each *_perf binary describes its collective in a
// CollTest and calls perfMain().
#pragma once
#include <cstddef>

#include "tern/tern.h"

namespace ternperf {

// "64M", "1G", "4096": bytes (exits with the usage on a bad suffix).
size_t parseSize(const char* s, const char* prog);

// Seconds on the steady clock.
double now();

struct Sizes {
  size_t sendElems, recvElems;  // buffer sizes (elements) per rank
  size_t count;                 // the "count" column and the call's count argument
  size_t sendInplaceOffset;     // in-place: sendbuff = recvbuff + this many elements
  size_t recvInplaceOffset;     // in-place: recvbuff = recvbuff + this many elements
};

// The library being measured.  tern's collectives go through tern(); the
// all_reduce comparison also runs over MPI and Gloo through allReduce().
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* transport() const = 0;  // how this rank reaches the next
  virtual bool allReduce(const void* send, void* recv, size_t count, ternDataType_t dt,
                         ternRedOp_t op) = 0;
  // `count` elements to and from every rank; only backends that have it.
  virtual bool allToAll(const void* send, void* recv, size_t count, ternDataType_t dt) {
    (void)send, (void)recv, (void)count, (void)dt;
    return false;
  }
  virtual bool barrier() = 0;
  virtual const char* lastError() const = 0;
  virtual ternComm_t tern() { return nullptr; }
};

struct CollTest {
  const char* name;
  bool hasOp, hasRoot;
  // Buffer sizes for a message of `bytes` bytes of `esz`-byte elements.
  Sizes (*sizes)(size_t bytes, size_t esz, int nranks, int rank);
  double (*busFactor)(int nranks);
  bool (*run)(Backend& b, const void* send, void* recv, size_t count, ternDataType_t dt,
              ternRedOp_t op, int root);
  // Fills this rank's send buffer with verifiable values.
  void (*fill)(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int root,
               int rank, int nranks);
  // Counts wrong elements of this rank's recv buffer.
  size_t (*check)(const void* recv, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int root,
                  int rank, int nranks);
  // What -T 1 runs instead (the ternary-compressed variant), if there is one.
  const CollTest* ternary = nullptr;
};

// Runs the benchmark over `backend` (tern from the launcher's environment
// when null).
int perfMain(int argc, char** argv, const CollTest& t, Backend* backend = nullptr);

// Building blocks shared by the collectives whose send and receive buffers
// both hold `count` elements (allreduce, reduce, broadcast, sendrecv).
Sizes sameCountSizes(size_t bytes, size_t esz, int nranks, int rank);
void fillRankValues(void* send, const Sizes& s, ternDataType_t dt, ternRedOp_t op, int root,
                    int rank, int nranks);
// Wrong elements of a buffer that must hold the reduction over all ranks.
size_t countWrongReduction(const void* recv, size_t count, ternDataType_t dt, ternRedOp_t op,
                           int nranks);

// The all_reduce test, shared by all_reduce_perf and the peer benchmarks;
// kAllReduceTest.ternary is ternAllReduceTernary on inputs in {-1, 0, 1}
// (magnitudes equal to their block's scale, so results are exact).
extern const CollTest kAllReduceTest;

// alltoall (through Backend::allToAll, so the peers run it too), gather and
// scatter (tern only): size = the bytes of all blocks of one rank.
extern const CollTest kAllToAllTest, kGatherTest, kScatterTest;

}  // namespace ternperf
