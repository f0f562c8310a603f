// The CUDA codec's kernels (codec/ternary_cuda.h) and memory's block
// statistics as a TernaryKernels table (isa "cuda-sync"): device buffers,
// each call synchronous on the whole device (ternary_sync_table.cu).
#pragma once
#include "codec/ternary_cpu.h"

namespace tern {

const TernaryKernels& ternaryCudaSyncKernels();

}  // namespace tern
