// Element-wise reductions for every datatype and op.  float16 and bfloat16
// are reduced in float32 and rounded back (to nearest even), as NCCL does.
#pragma once
#include <cstddef>

#include "tern/tern.h"

namespace tern {

// dst[i] = a[i] (op) b[i] for i < count.  dst may alias a or b.  When
// avgDivisor > 0 (ternAvg on the last reduction) the sum is divided by it;
// integer averages truncate like C division.
void reduceKernel(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
                  ternRedOp_t op, int avgDivisor);

// buf[i] = buf[i] / divisor (ternAvg after a sum computed elsewhere).
void divideKernel(void* buf, size_t count, ternDataType_t dt, int divisor);

// dst[i] = src[i] * scalar (one element of dt): a PreMulSum's scaling, the
// product of ternProd (16-bit floats multiplied in float32 and rounded once,
// integers wrapping), as NCCL's PreMulSum computes it.
void scaleKernel(void* dst, const void* src, size_t count, ternDataType_t dt, const void* scalar);

// The loops behind the three above, built for one instruction set
// ("baseline", "avx2", "avx512"; host_reduce.cc).
struct HostReduceLoops {
  const char* name;
  void (*reduce)(void*, const void*, const void*, size_t, ternDataType_t, ternRedOp_t, int);
  void (*divide)(void*, size_t, ternDataType_t, int);
  void (*scale)(void*, const void*, size_t, ternDataType_t, const void*);
};
// Those for `isa`, or null where this CPU cannot run them.
const HostReduceLoops* hostReduceLoops(const char* isa);
// Those in use: the widest this CPU runs, or TERN_REDUCE_ISA's.
const HostReduceLoops& hostReduce();

}  // namespace tern
