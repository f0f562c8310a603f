#!/usr/bin/env bash
# scripts/test.sh [--sanitize|--tsan]: install dependencies, build, run the suite.
#   --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build of the
#                core tests (ctest label "core") in build-asan/.
#   --tsan       ThreadSanitizer build of the engine, collective and
#                point-to-point tests (several threads per communicator,
#                statistics read during traffic; the fifo's restart across threads) in build-tsan/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "${1:-}" = "--sanitize" ]; then
  ./scripts/build.sh build-asan -DTERN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTERN_BUILD_BINDINGS=OFF
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
  # hwloc's PCI plugin (libpciaccess) leaks ~1 KB once per process and is
  # unloaded before LeakSanitizer reports, so no suppression can name it:
  # the sanitizer run discovers without the PCI tree (XML tests still cover it).
  export HWLOC_PLUGINS_BLACKLIST=hwloc_pci
  (cd build-asan && ctest -L core --output-on-failure)
elif [ "${1:-}" = "--tsan" ]; then
  ./scripts/build.sh build-tsan -DTERN_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTERN_BUILD_BINDINGS=OFF \
    -DTERN_WITH_CUDA=OFF -DTERN_WITH_UCX=OFF
  # Without UCX: its memory hooks (libucm) crash under TSan (UCX is covered by
  # the plain and ASan runs).  halt_on_error: a report fails the test.
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  (cd build-tsan && ctest -L core -R "Engine|Mismatch|DeadPeer|ConnTable|ConfigStruct|Priority|P2P|RecvAny|Collectives|Stats|FaultsAbort|WeightStream|SmallMessages|SmallPath|AbortDuring|RootedChecks|LlStream|DeviceSim|Fifo" \
     --output-on-failure)
else
  ./scripts/build.sh build
  (cd build && ctest --output-on-failure)
fi
