// The perf harness, after nccl-tests' common.cu: same flags, same table,
// same busbw factors.  Each *_perf binary describes its collective in a
// CollTest and calls perfMain().
#pragma once
#include <cstddef>
#include <cstdio>

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

// The library being measured: tern, or a peer (MPI, Gloo) for the
// side-by-side tables of perf/compare.  Every collective goes through these
// calls with tern's meaning of the arguments (count per rank where tern's
// signature says so; in place as tern defines it); a backend that lacks one
// returns false and says so in lastError().
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* transport() const = 0;  // how this rank reaches the next
  virtual bool allReduce(const void* send, void* recv, size_t count, ternDataType_t dt,
                         ternRedOp_t op) = 0;
  // `count` elements to and from every rank.
  virtual bool allToAll(const void*, void*, size_t, ternDataType_t) { return lacks("alltoall"); }
  virtual bool allGather(const void*, void*, size_t, ternDataType_t) { return lacks("allgather"); }
  virtual bool reduceScatter(const void*, void*, size_t, ternDataType_t, ternRedOp_t) {
    return lacks("reduce_scatter");
  }
  virtual bool broadcast(const void*, void*, size_t, ternDataType_t, int) { return lacks("broadcast"); }
  virtual bool reduce(const void*, void*, size_t, ternDataType_t, ternRedOp_t, int) {
    return lacks("reduce");
  }
  virtual bool gather(const void*, void*, size_t, ternDataType_t, int) { return lacks("gather"); }
  virtual bool scatter(const void*, void*, size_t, ternDataType_t, int) { return lacks("scatter"); }
  // A ring shift: send to rank+1 and receive from rank-1 at once.
  virtual bool sendRecv(const void*, void*, size_t, ternDataType_t) { return lacks("sendrecv"); }
  virtual bool barrier() = 0;
  virtual const char* lastError() const = 0;
  virtual ternComm_t tern() { return nullptr; }
  // -R 1 (nccl-tests' flag for registered buffers): the library's own
  // memory for communication (ternMemAlloc, MPI_Alloc_mem), zeroed;
  // nullptr where it has none (plain pages then).
  virtual void* allocComm(size_t) { return nullptr; }

 protected:
  bool lacks(const char* coll) {
    snprintf(lacking_, sizeof lacking_, "%s: this backend has no %s", transport(), coll);
    return false;
  }
  char lacking_[96] = "";
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

// alltoall, gather and scatter: size = the bytes of all blocks of one rank.
extern const CollTest kAllToAllTest, kGatherTest, kScatterTest;
// allgather, reduce_scatter, broadcast, reduce, sendrecv (harness/colls_test.cc).
extern const CollTest kAllGatherTest, kReduceScatterTest, kBroadcastTest, kReduceTest,
    kSendRecvTest;
// The test of that name ("all_reduce", "alltoall", ...), or nullptr.
const CollTest* collTestByName(const char* name);

}  // namespace ternperf
