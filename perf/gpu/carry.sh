#!/usr/bin/env bash
# Builds everything perf/gpu/run.sh runs, HERE (a machine with nvcc and no
# GPU), and packs it for a lent GPU machine, so that its minutes go to the
# checks rather than to compiling:
#   perf/gpu/carry.sh [NCCL_TESTS_DIR]
# leaves .gpucarry/build-gpu (binaries, CTest files; no objects), ignored by
# git.  On the GPU machine, from the repository root (the build's paths are
# absolute, so the checkout must be reachable at this same path):
#   [ -e /work/main ] || ln -s "$PWD" /work/main; cd /work/main
#   ln -sfn .gpucarry/build-gpu build-gpu
#   TERN_GPU_PREBUILT=1 NCCL_TESTS_DIR=/tmp NCCL_TESTS_REAL=auto perf/gpu/run.sh
# (the device tool: carry ".gpucarry").  UCX and hwloc are left out of this
# build: a bare GPU image has neither library, and no GPU check needs them.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-gpu
source perf/gpu/build_checks.sh
build_gpu_checks "$build" -DTERN_WITH_UCX=OFF -DTERN_WITH_HWLOC=OFF -DTERN_WITH_VERBS=OFF
if [ -n "${1:-}" ]; then
  NCCL_TESTS_BUILD_ONLY=1 BUILD_DIR="$build" perf/gpu/nccl_tests.sh "$1" >/dev/null
fi
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.gpucarry/' "$exclude" 2>/dev/null || echo '/.gpucarry/' >>"$exclude"
rm -rf .gpucarry && mkdir .gpucarry
tar --exclude CMakeFiles --exclude '*.o' --exclude '*.a' --exclude Makefile -cf - "$build" | tar -C .gpucarry -xf -
# nccl-tests: all_reduce_perf alone (the others are 60 MiB more).
if [ -d .gpucarry/$build/nccl-tests ]; then
  find .gpucarry/$build/nccl-tests -mindepth 1 ! -name all_reduce_perf -delete
fi
du -sh .gpucarry
