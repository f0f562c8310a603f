#!/usr/bin/env bash
# One command on a bare GPU machine: builds tern with CUDA and runs every GPU
# check that exists, each reported PASS/FAIL/SKIP; exits non-zero if any failed.
#   perf/gpu/run.sh
#   GPU_STEPS="devperf ddp" perf/gpu/run.sh   (these steps alone, in this order; the
#     names are the functions below; ELEMENTS: the kernel check's size)
#   NCCL_TESTS_DIR=/path/to/nccl-tests perf/gpu/run.sh   (also nccl-tests through the shim)
#   TERN_GPU_PREBUILT=1 BUILD_DIR=build-gpu perf/gpu/run.sh   (BUILD_DIR was built on
#     another host at this same path, e.g. one with the toolchain but no GPU: nothing
#     is configured or built here, which saves a lent GPU's minutes)
#   STEP_TIMEOUT=S: each step is killed after S seconds (default 600), so that
#     one hang cannot eat the whole lease; a killed step is a FAIL, printed
#     with the backtraces of its processes (cuda-gdb or gdb) first.
#
#  1. ternary_gpu_check: the CUDA ternary kernels (error feedback's fused
#     encode too) bit for bit against the CPU codec, and timed against the
#     device's measured copy bandwidth.
#  2. test_ternary_nvcc: the element math compiled by nvcc, against the CPU kernels.
#  3. the NCCL shim's own tests (ABI, config, 3-rank C client on host buffers).
#  4. `import torch` with the shim first on the library path, and under LD_AUDIT:
#     torch binds every nccl symbol it was built with at import, and
#     torch.cuda.nccl.version() must be the shim's 2.23.0.
#  5. (run last) with NCCL_TESTS_DIR: perf/gpu/nccl_tests.sh: nccl-tests' all_reduce_perf
#     1 MiB .. 1 GiB on the shim and on the machine's real NCCL
#     (NCCL_TESTS_REAL=auto), interleaved, twice each; one rank per GPU (on a
#     one-GPU machine both are 1-rank runs: it says so).
#  6. (cudamem) the CUDA memory type: perf/gpu/cuda_memory.sh runs
#     tests/test_memory_cuda.cu (reduce of every dtype/op vs the host bit for
#     bit, the codec via MemOps vs the CPU, fences, stream holds, pointer
#     kinds, pinned staging).
#  7. (gpupath) device buffers on a CUDA stream through tern's engine:
#     tests/test_device_colls.cu runs every collective, send/recv, PreMulSum
#     ops and the ternary allreduce on cudaMalloc'ed buffers, 2 and 3 ranks (processes;
#     one GPU shared is fine), over shm and tcp, against the host path bit
#     for bit, with a spinning kernel before and a reading kernel after each
#     call (stream order), and the ternary allreduce with error feedback over
#     several calls (residuals on the device, updated by the fused encode
#     kernel); exit 77 (no device) counts as FAIL here.
#  8. (ipc) CUDA IPC between 2 ranks (processes) of this host: send/recv,
#     all-to-all, gather, scatter device to device from the peer's buffer,
#     nothing staged through host memory; prints which path each rank took
#     and the INFO lines naming it (2 ranks on one GPU when it has one).
#  9. torch.distributed backend "nccl" on the shim (LD_AUDIT): 20 DDP steps
#     of 2 ranks (perf/gpu/ddp_loss.py), whose losses must equal the real
#     NCCL's (2 GPUs or more) or, on one GPU where the real NCCL refuses two
#     ranks on one device, DDP's step emulated in one process (always run
#     too); bitwise, as a sum of two is the same in either order.
# 11. (enqueue) the host cost of one allreduce on device buffers, staged and
#     on the engine's path (perf/device_enqueue_cost --cuda).
# 10. (devperf) tern's allreduce on device buffers, 1 MiB .. 1 GiB, 2 ranks
#     (sharing the GPU on a one-GPU machine, which the real NCCL refuses),
#     beside the host-staging limit (pinned D2H / H2D of the same size on
#     the same device): perf/gpu/device_allreduce_perf.cu; every size checked.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
build=${BUILD_DIR:-build-gpu}
py=${PYTHON:-python3}
failed=0
# Backtraces of every thread of process group $1 (cuda-gdb, else gdb): what a
# hung step was waiting on (the two-rank deadlock of perf/RESULTS.md,
# 2026-11-27: GPU checks on an H200, was found this way).
backtraces() {
  local dbg n=0
  dbg=$(command -v cuda-gdb || command -v gdb) || { echo "(no cuda-gdb or gdb for backtraces)"; return; }
  # The launchers (ternrun, mp.spawn) say little: the deepest processes first,
  # at most BACKTRACE_PROCS of them, 20 s each, so that a hang's report fits
  # the lease (three Python ranks' full backtraces took minutes on an H200).
  for p in $(descendants "$1" | tac); do
    [ "$n" -ge "${BACKTRACE_PROCS:-3}" ] && { echo "(more processes left out)"; break; }
    n=$((n + 1))
    echo "--- pid $p: $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-120)"
    timeout 20 "$dbg" -q -batch -p "$p" -ex 'thread apply all bt 12' 2>&1 |
      grep -E '^#|^Thread' | grep -vE 'libcudadebugger|\?\? \(\) from /lib' | head -80
  done
}
descendants() {  # descendants PID: PID and every process below it, parents first
  local p
  echo "$1"
  for p in $(pgrep -P "$1"); do descendants "$p"; done
}
step() {  # step NAME COMMAND...: runs it (at most STEP_TIMEOUT s), prints the verdict
  local name=$1 rc
  shift
  echo "=== $name"
  local t0=$SECONDS limit=${STEP_TIMEOUT:-600}
  setsid "$@" &  # its own process group: backtraces and the kill reach all of it
  local pid=$!
  while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - t0)) -lt "$limit" ]; do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "TIMEOUT after $limit s; backtraces:"
    backtraces "$pid"
    kill -TERM -- -"$pid" 2>/dev/null; sleep 3; kill -KILL -- -"$pid" 2>/dev/null
    wait "$pid"
    rc=124
  else
    wait "$pid"
    rc=$?
  fi
  if [ "$rc" -eq 0 ]; then echo "PASS $name ($((SECONDS - t0)) s)"
  else echo "FAIL $name (rc $rc, $((SECONDS - t0)) s)"; failed=$((failed + 1)); fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if [ "${TERN_GPU_PREBUILT:-0}" = 1 ]; then
  echo "prebuilt: $build (nothing is built here; checks whose binary is missing are skipped, said so)"
  [ -x "$build/perf/ternary_gpu_check" ] || { echo "no $build/perf/ternary_gpu_check"; exit 1; }
else
  source perf/gpu/build_checks.sh
  build_gpu_checks "$build" || exit 1
fi

# Each check is a function; GPU_STEPS names which run, in that order.  The
# default runs the device-buffer checks first (two ranks on device buffers
# were the open question of the first GPU session), nccl-tests last (slowest).
kernels() {
  step "ternary kernels vs CPU and copy bandwidth" "$build/perf/ternary_gpu_check" "${ELEMENTS:-67108864}"
}
nvcc_math() {
  have tests/test_ternary_nvcc || return 0
  step "nvcc element math" "$build/tests/test_ternary_nvcc"
}
shim() {
  have tests/test_nccl_shim || return 0
  # Prebuilt: three tests read the build host's nccl.h or run its cmake; they ran there.
  local skip='^$'
  [ "${TERN_GPU_PREBUILT:-0}" = 1 ] && skip='EveryHeaderFunction|WithoutAuditTheRealNcclLoads|AuditRedirectsLibnccl'
  step "NCCL shim tests (host path)" bash -c "cd '$build' && ctest -R 'NcclShim' -E '$skip' --output-on-failure"
}
torch_import() {  # which libnccl torch bound, and that importing it resolved every symbol
  "$py" -c "import torch" 2>/dev/null || { echo "SKIP import torch: no torch for $py"; return 0; }
  local probe='import torch, torch.distributed as dist
v = torch.cuda.nccl.version()
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "nccl", v,
      "(tern shim)" if tuple(v[:2]) == (2, 23) else "(NOT the shim: a real NCCL was found first)")
assert dist.is_nccl_available()'
  # A wheel whose RPATH names its bundled NCCL can win over LD_LIBRARY_PATH:
  # the print says which one came; LD_AUDIT below must always give the shim.
  step "import torch with the shim first on LD_LIBRARY_PATH" \
    env LD_LIBRARY_PATH="$shim_dir:${LD_LIBRARY_PATH:-}" "$py" -c "$probe"
  step "import torch under LD_AUDIT (must be the shim)" \
    env LD_AUDIT="$shim_dir/libtern_nccl_audit.so" "$py" -c "$probe
assert tuple(v[:2]) == (2, 23)"
}
cudamem() {  # MemOps on a stream, pointer kinds, pinned staging
  have tests/test_memory_cuda || return 0
  step "CUDA memory type (reduce, codec, fences, holds, pointer kinds, staging)" \
    perf/gpu/cuda_memory.sh "$build"
}
device_colls() {  # device buffers on a CUDA stream through tern's engine
  have tests/test_device_colls || return 0
  step "device collectives vs host path, stream order, ternary device = CPU (test_device_colls)" \
    "$build/tests/test_device_colls" --gtest_filter="${DEVICE_COLLS_FILTER:-*}"
}
ipc() {  # CUDA IPC between the ranks of this host
  have tests/test_device_colls || return 0
  local gpus ipc_log
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  echo "CUDA IPC check: 2 ranks on $([ "$gpus" -gt 1 ] && echo "GPUs 0 and 1" || echo "one GPU (2 processes share it)")"
  ipc_log=$(mktemp)
  step "CUDA IPC: plain transfers device to device, nothing staged (DeviceCollsIpc)" \
    bash -c "TERN_DEBUG=INFO '$build/tests/test_device_colls' --gtest_filter='DeviceCollsIpc.*' >'$ipc_log' 2>&1; rc=\$?; grep -E 'plain transfers took|GPU|FAIL' '$ipc_log'; exit \$rc"
  echo "paths the engine logged (INFO):"
  grep -oE '(device buffers over IPC|streams through the fifo|cannot be exported)[^(]*' "$ipc_log" | sort | uniq -c
  rm -f "$ipc_log"
}
devperf() {  # tern's device allreduce against the host-staging limit
  step "device allreduce 1 MiB-1 GiB, 2 ranks, beside the staging limit (device_allreduce_perf)" \
    tools/ternrun -n 2 "$build/perf/device_allreduce_perf" -b 1M -e 1G -n "${DEVPERF_ITERS:-10}"
}
ddp() {  # torch.distributed "nccl" on the shim: DDP losses equal to the real NCCL's
  "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || { echo "SKIP DDP: no torch with CUDA for $py"; return 0; }
  local d gpus
  d=$(mktemp -d)
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  step "DDP, backend nccl on the shim (LD_AUDIT), 2 ranks" \
    env LD_AUDIT="$shim_dir/libtern_nccl_audit.so" "$py" perf/gpu/ddp_loss.py run --world 2 --out "$d/shim.json"
  step "DDP step emulated in one process (reference)" \
    "$py" perf/gpu/ddp_loss.py reference --world 2 --out "$d/emulated.json"
  step "DDP losses: shim = emulated step" "$py" perf/gpu/ddp_loss.py compare "$d/shim.json" "$d/emulated.json"
  if [ "$gpus" -ge 2 ]; then
    step "DDP, backend nccl on the real NCCL, 2 ranks" \
      env -u LD_AUDIT "$py" perf/gpu/ddp_loss.py run --world 2 --out "$d/real.json"
    step "DDP losses: shim = real NCCL" "$py" perf/gpu/ddp_loss.py compare "$d/shim.json" "$d/real.json"
  else
    echo "NOTE: one GPU: the real NCCL refuses two ranks on one device (duplicate GPU), so the shim's"
    echo "      losses are compared with DDP's step emulated in one process only"
  fi
  rm -rf "$d"
}
enqueue() {  # the host cost of one device collective, staged and on the engine's path
  step "host cost of enqueuing one allreduce on device buffers, 2 ranks (target <= 5 us)" bash -c \
    "'$build/perf/device_enqueue_cost' 2000 --cuda && TERN_STAGED_MAX_BYTES=0 '$build/perf/device_enqueue_cost' 2000 --cuda"
}
nccltests() {  # the slowest step, and only 1 rank on a one-GPU machine
  [ -n "${NCCL_TESTS_DIR:-}" ] || { echo "SKIP nccl-tests: set NCCL_TESTS_DIR to a checkout of NVIDIA/nccl-tests"; return 0; }
  step "nccl-tests all_reduce_perf, tern (shim) vs the real NCCL" \
    env BUILD_DIR="$build" NCCL_TESTS_REAL="${NCCL_TESTS_REAL:-auto}" perf/gpu/nccl_tests.sh "$NCCL_TESTS_DIR"
}
have() {  # have PATH: the binary was built (GoogleTest-based ones may not be)
  [ -x "$build/$1" ] && return 0
  echo "SKIP $1: not built (no GoogleTest?)"
  return 1
}

shim_dir=$(cd "$build/nccl_shim" && pwd)
for s in ${GPU_STEPS:-device_colls ipc devperf ddp enqueue kernels nvcc_math cudamem shim torch_import nccltests}; do
  "$s"
done
echo "$failed step(s) failed"
exit $((failed > 0))
