#!/usr/bin/env bash
# The CUDA memory type's GPU checks (tests/test_memory_cuda.cu): reductions of
# every datatype and op vs the host bit for bit, the ternary codec through
# MemOps vs the CPU codec, block stats / error feedback, fence polling behind
# a running kernel, pointerKind of device / managed / pinned / registered
# memory, and the pinned staging pool.  Builds the test in BUILD_DIR (a CUDA
# build with tests, as perf/gpu/run.sh configures it) and runs it.
#   perf/gpu/cuda_memory.sh [BUILD_DIR]
# Exit 0 only if every check ran and passed: no device (the test's exit 77)
# is a failure here, since this script exists to run on a GPU machine.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build=${1:-build-gpu}
if [ "${TERN_GPU_PREBUILT:-0}" != 1 ]; then  # prebuilt elsewhere (perf/gpu/run.sh)
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTERN_BUILD_BINDINGS=OFF -DTERN_WITH_CUDA=ON \
          -DTERN_BUILD_TESTS=ON -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" >/dev/null || exit 1
  fi
  cmake --build "$build" -j"$(nproc)" --target test_memory_cuda >/dev/null || {
    echo "cuda_memory: could not build test_memory_cuda (a build without CUDA or GoogleTest?)"
    exit 1
  }
fi
"$build/tests/test_memory_cuda"
rc=$?
[ $rc -eq 77 ] && echo "cuda_memory: NOT RUN (no usable CUDA device)"
exit $rc
