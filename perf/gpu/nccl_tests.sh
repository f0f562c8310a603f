#!/usr/bin/env bash
# Builds a checkout of NVIDIA's nccl-tests that YOU point at against tern's
# libnccl.so.2 (nothing is fetched), and runs all_reduce_perf through it.
#
#   perf/gpu/nccl_tests.sh NCCL_TESTS_DIR [all_reduce_perf args...]
#
# Env: BUILD_DIR (tern's build, default build-gpu), NVCC_GENCODE (default sm_90),
#      TERN_GPU_PREBUILT=1 (all_reduce_perf already built in NCCL_TESTS_OUT: no make),
#      NCCL_TESTS_BUILD_ONLY=1 (stop after building: machines without a GPU),
#      NCCL_TESTS_OUT (where nccl-tests builds, default $BUILD_DIR/nccl-tests),
#      NCCL_TESTS_REAL=DIR|auto: also run the same binary on the machine's
#      real libnccl.so.2 (in DIR; auto: the toolkit's, the system's or the
#      nvidia-nccl wheel's), interleaved with the shim's runs, twice each.
#
# NCCL_HOME comes from perf/gpu/nccl_home.sh: the CUDA toolkit's own nccl.h
# (and nccl_device*, which nccl-tests >= 2.28 includes) beside the shim, so
# nccl-tests compiles against the real header and links the shim.
# It runs under LD_AUDIT as well, so a real NCCL elsewhere on the library
# path cannot be loaded beside the shim.
#
# nccl-tests allocates device buffers and passes its CUDA stream: the shim
# hands both to tern's device path (device buffers on a stream, PreMulSum
# included).  nccl-tests runs one rank per GPU (-g: GPUs per process), so on
# a one-GPU machine both libraries run one rank (no traffic between ranks):
# said so when it happens.  Not yet measured on a GPU (see perf/RESULTS.md).
set -euo pipefail
tests_dir=${1:?usage: nccl_tests.sh NCCL_TESTS_DIR [all_reduce_perf args]}
shift
tests_dir=$(cd "$tests_dir" && pwd)
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${BUILD_DIR:-build-gpu}
cuda=${CUDA_HOME:-/usr/local/cuda}

if [ ! -e "$build/nccl_shim/libnccl.so.2" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTERN_BUILD_TESTS=OFF -DTERN_BUILD_BINDINGS=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target tern_nccl tern_nccl_audit >/dev/null
fi
shim_dir=$(cd "$build/nccl_shim" && pwd)

home=$(perf/gpu/nccl_home.sh "$build")

out=${NCCL_TESTS_OUT:-$root/$build/nccl-tests}
# TERN_GPU_PREBUILT=1: built on another host at this path (perf/gpu/run.sh).
if [ "${TERN_GPU_PREBUILT:-0}" != 1 ] || [ ! -x "$out/all_reduce_perf" ]; then
  make -C "$tests_dir/src" -j"$(nproc)" NCCL_HOME="$home" CUDA_HOME="$cuda" BUILDDIR="$out" \
       NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}" build
fi
# The run's loader environment: the shim first, and LD_AUDIT so that no
# other libnccl.so.2 (ld.so.conf may list the toolkit's) is ever chosen.
export LD_LIBRARY_PATH="$home/lib:$shim_dir:${LD_LIBRARY_PATH:-}"
export LD_AUDIT="$shim_dir/libtern_nccl_audit.so"
echo "built: $out/all_reduce_perf; it will load:"
ldd "$out/all_reduce_perf" | grep -E "nccl|tern" || true
[ "${NCCL_TESTS_BUILD_ONLY:-0}" = 1 ] && exit 0

# -b/-e/-f: 1 MiB .. 1 GiB, x2; -g: every GPU, one rank each; -c 1: check results.
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
[ "$gpus" -ge 1 ] || gpus=1
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-b 1M -e 1G -f 2 -g "$gpus" -c 1)
[ "$gpus" -eq 1 ] && echo "NOTE: one GPU: nccl-tests runs one rank per GPU, so this is a 1-rank run"

# The machine's real NCCL: a libnccl.so.2 that is not the shim.
real_dir() {
  local d
  for d in "$cuda/lib64" "$cuda/lib" /usr/lib/x86_64-linux-gnu \
           $(python3 -c 'import glob, sys  # the nvidia-nccl wheels (torch needs one), any layout
for d in sys.path: print(*sorted({p.rsplit("/", 1)[0] for p in glob.glob(d + "/nvidia/**/libnccl.so.2", recursive=True)}))' 2>/dev/null); do
    if [ -n "$d" ] && [ -e "$d/libnccl.so.2" ] && [ "$(readlink -f "$d/libnccl.so.2")" != "$(readlink -f "$shim_dir/libnccl.so.2")" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}
real=${NCCL_TESTS_REAL:-}
if [ "$real" = auto ]; then real=$(real_dir) || { echo "no real libnccl.so.2 found" >&2; exit 1; }; fi
shim_env=(env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" LD_AUDIT="$LD_AUDIT")
real_env=(env -u LD_AUDIT LD_LIBRARY_PATH="$real:${LD_LIBRARY_PATH#"$home/lib:$shim_dir:"}")
rounds=1
[ -n "$real" ] && rounds=2
for round in $(seq "$rounds"); do
  echo "--- tern (shim), round $round"
  "${shim_env[@]}" "$out/all_reduce_perf" "${args[@]}"
  if [ -n "$real" ]; then
    echo "--- real NCCL ($real/libnccl.so.2), round $round"
    "${real_env[@]}" "$out/all_reduce_perf" "${args[@]}"
  fi
done
