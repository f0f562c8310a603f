#!/usr/bin/env bash
# Builds tern with CUDA and runs the GPU checks and timings of the ternary
# kernels on the first visible device.  Needs nvcc and a GPU.
#   perf/gpu/run.sh [elements]
set -euo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTERN_BUILD_TESTS=OFF \
      -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" >/dev/null
cmake --build build-gpu -j"$(nproc)" --target ternary_gpu_check >/dev/null
build-gpu/perf/ternary_gpu_check "${1:-67108864}"
