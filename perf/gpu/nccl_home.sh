#!/usr/bin/env bash
# Makes an NCCL_HOME for building programs against tern's shim and prints its
# path: include/ = the CUDA toolkit's own nccl.h (and nccl_device*), lib/ =
# tern's libnccl.so.2.  For nccl-tests (NCCL_HOME=), Horovod
# (HOROVOD_NCCL_HOME= with HOROVOD_NCCL_LINK=SHARED), or any -I/-L build.
#   perf/gpu/nccl_home.sh [BUILD_DIR]     (default build; the shim must be built there)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
shim_dir=$(cd "$build/nccl_shim" && pwd)
[ -e "$shim_dir/libnccl.so.2" ] || { echo "no $shim_dir/libnccl.so.2: build target tern_nccl" >&2; exit 1; }
home="$(pwd)/$build/nccl-home"
mkdir -p "$home/include" "$home/lib"
for h in nccl.h nccl_device.h nccl_device; do
  if [ -e "$cuda/include/$h" ]; then ln -sfn "$cuda/include/$h" "$home/include/$h"; fi
done
ln -sfn "$shim_dir/libnccl.so.2" "$home/lib/libnccl.so.2"
ln -sfn "$shim_dir/libnccl.so.2" "$home/lib/libnccl.so"
echo "$home"
