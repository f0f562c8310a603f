// CUDA kernels behind the CUDA memory type (built with TERN_WITH_CUDA).
// Each enqueues on `stream` (a cudaStream_t) and returns the launch's
// cudaError_t as an int (0: launched).  Same element math as the host path
// (reduce_ops.h, ternary_math.h): the results are bit-identical wherever the
// host's are exact, which is everywhere but nothing (IEEE float ops without
// contraction; sums of squares in the host's order).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tern/tern.h"

namespace tern {

// dst[i] = a[i] (op) b[i], / avgDivisor when > 0: reduceKernel on device.
int cudaReduce(void* dst, const void* a, const void* b, size_t count, ternDataType_t dt,
               ternRedOp_t op, int avgDivisor, void* stream);
// buf[i] /= divisor: divideKernel on device.
int cudaDivide(void* buf, size_t count, ternDataType_t dt, int divisor, void* stream);
// dst[i] = src[i] * *scalar (scalar: one element in device memory, read
// when the kernel runs): scaleKernel on device.
int cudaScale(void* dst, const void* src, size_t count, ternDataType_t dt, const void* scalar,
              void* stream);
// Per block max |g| (and sum of g^2 in the host's order): ternaryBlockStats.
int cudaBlockStats(const void* g, ternDataType_t dt, size_t count, uint32_t block, float* maxAbs,
                   float* sumSq, void* stream);

// Loads every kernel above now (lazy loading would load each at its first
// launch, and loading may wait for the whole context: memory/cuda_ops.cu,
// prepare()).  The launch's cudaError_t as an int.
int cudaPreloadReduceKernels();

}  // namespace tern
