# Sourced by perf/gpu/run.sh (which runs the checks) and perf/gpu/carry.sh
# (which builds them on a host without a GPU, for a lent one):
#   build_gpu_checks BUILD_DIR [CMAKE_ARGS...]
# configures a Release CUDA build in BUILD_DIR and builds every binary the
# checks run.  A bare machine may lack GoogleTest (and no package registry is
# reachable from it): then the tests that need it are left out, said so.
# Run from the repository root; non-zero when the build failed.
build_gpu_checks() {
  local build=$1
  shift
  local cfg=(-S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTERN_BUILD_BINDINGS=OFF -DTERN_WITH_CUDA=ON
             -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" "$@")
  local targets=(ternary_gpu_check device_allreduce_perf device_enqueue_cost tern_nccl tern_nccl_audit)
  if cmake "${cfg[@]}" -DTERN_BUILD_TESTS=ON >/dev/null; then
    targets+=(test_ternary_nvcc test_nccl_shim nccl_client nccl_audit_probe)
    targets+=(test_memory_cuda)  # cudamem
    targets+=(test_device_colls)  # gpupath
  else
    echo "SKIP the GoogleTest-based checks: configuring with tests failed (libgtest-dev missing?)"
    cmake "${cfg[@]}" -DTERN_BUILD_TESTS=OFF >/dev/null || return 1
  fi
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null
}
