#!/usr/bin/env bash
# scripts/test.sh [--sanitize|--tsan]: install dependencies, build, run the suite.
#   (none)       everything built in build/, every test run; then the check
#                that the sanitizer stages' targets hold every test they select.
#   --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build of the
#                core tests (ctest label "core", less ASAN_EXCLUDE below) in
#                build-asan/, without CUDA: only their executables are built
#                (target tests_core).
#   --tsan       ThreadSanitizer build of the engine, collective and
#                point-to-point tests (several threads per communicator,
#                statistics read during traffic; the fifo's restart across
#                threads) in build-tsan/: label "core", names matching
#                TSAN_TESTS below, less TSAN_EXCLUDE; only their executables
#                (target tests_tsan).
# ctest runs TERN_TEST_JOBS tests at once (default: 2 per core; most tests wait
# on sockets and timeouts more than they compute).  Tests that time something
# or shape links run alone (RUN_SERIAL in tests/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=${TERN_TEST_JOBS:-$((2 * $(nproc)))}
TSAN_TESTS="Engine|Mismatch|DeadPeer|ConnTable|ConfigStruct|Priority|P2P|RecvAny|Collectives|Stats|FaultsAbort|WeightStream|SmallMessages|SmallPath|AbortDuring|RootedChecks|LlStream|DeviceSim|Fifo"
# Cases that a sanitizer stage leaves to the plain one, each covered in that
# stage by another case:
# - collective suites (tests/test_collectives.cc, test_alltoall.cc): one rank
#   over tcp or UCX (one rank has no peer: no transport carries a byte, the
#   same code as shm_1ranks); 3 and 4 ranks over UCX (ASan: the 3- and
#   4-rank collectives run over shm and tcp, the UCX transport as
#   ucx_*_2ranks, whose connections are made and driven as at any width:
#   one per peer); TSan: 4 ranks over tcp and shm, 3 over tcp, 1 over shm (the
#   transport's threads race alike at tcp_2ranks; shm_2ranks and _3ranks run
#   the engine with one peer and with a peer on each side; one rank has no
#   peer, and its engine runs in every other case);
# - ASan: the engine cases over UCX (the engine's code is the transport's
#   caller alike over shm and tcp; UCX's own code runs in the collective and
#   point-to-point cases) and the 5- and 6-rank ternary cases (3 and 4 ranks
#   take the same odd and even widths' code; the two-level form's 6-rank
#   layouts run the code of its 4-rank one, aabb).
# - TSan: the engine and device-simulation cases at 3 ranks (2 ranks over
#   shm and tcp stay; the 3-rank collectives run the engine with a peer on
#   each side); ASan: all-to-all at 4 ranks over tcp (shm_4ranks stays).
# Measured 2026-12-04: 219 of the ASan stage's 1596 test seconds, 191 of
# TSan's 1597; then, after the checker's tables: ASan's engine cases over
# UCX 105 of 1090, ternary at 5-6 ranks 37, all-to-all tcp_4ranks 15; TSan's
# shm_4ranks 74 of 1045, 3-rank engine cases ~105, 3-rank DeviceSim ~55;
# 2026-12-05, a clean-clone CI of 31.9 min: TSan's collectives at tcp_3ranks
# 97 s and shm_1ranks 36 s of its 433 s of tests; ASan's collectives and
# all-to-all at 3 ranks over UCX 75 of its 1155 (the suites also narrow
# their own sweeps under a sanitizer: tests/checker.h, test_plan_play.cc).
ASAN_EXCLUDE="^Transports/(Collectives\.AllSizesTypesOpsPlaces|AllToAll\.GatherScatterEveryRootAndSize)/((tcp|ucx_tcp|ucx_sm)_1ranks|ucx_(tcp|sm)_[34]ranks)( |\$)"
ASAN_EXCLUDE+="|^Transports/EngineCase\.[A-Za-z]+/ucx_(tcp|sm)_[23]ranks( |\$)|^Ranks/TernaryExact\.[A-Za-z]+/shm_[56]ranks( |\$)"
ASAN_EXCLUDE+="|^Transports/AllToAll\.GatherScatterEveryRootAndSize/tcp_4ranks( |\$)"
# (No more parenthesised groups: CMake's regular expressions take at most
# 9, and ctest ignores a longer one without a word, excluding nothing.)
ASAN_EXCLUDE+="|^Hosts/TernaryTwoLevel\.BitExactAgainstTheReference/aabbcc |^Hosts/TernaryTwoLevel\.BitExactAgainstTheReference/aaabbb "
TSAN_EXCLUDE="^Transports/Collectives\.AllSizesTypesOpsPlaces/(tcp_[134]|shm_[14])ranks( |\$)"
TSAN_EXCLUDE+="|^Transports/(EngineCase\.[A-Za-z]+/(shm|tcp)_3ranks|DeviceSim\.[A-Za-z]+/(shm|tcp)_3ranks_[a-z]+)( |\$)"
# Single-threaded decision and math code whose names match TSAN_TESTS (plan
# plays, the planners and their command line, the ternary codec): no thread
# to race; they and the planners' library took ~110 of the ASan build's ~560
# compile seconds (2026-12-05), alike in this build.
TSAN_EXCLUDE+="|^(PlanPlay|PlannerPriority|PlannerCli|TernaryMath|TernaryStats|Isa/Simd)\."

# An exclusion that leaves every test selected is one ctest could not
# compile (it says nothing): fail loudly instead.
check_excludes() {
  local all some
  all=$(cd build && ctest -N | sed -n 's/^Total Tests: //p')
  some=$(cd build && ctest -N -E "$1" | sed -n 's/^Total Tests: //p')
  if [ "$some" -ge "$all" ]; then
    echo "scripts/test.sh: this exclusion excludes nothing (CMake's regular expressions take at most 9 groups): $1" >&2
    exit 1
  fi
}

# Every test that `ctest <selection>` picks in the full build $1 runs an
# executable that the target $2 builds (listed in $1/tests/$2.txt).
check_target() {
  local dir=$1 target=$2
  shift 2
  (cd "$dir" && ctest --show-only=json-v1 "$@") | /usr/bin/python3 -c '
import json, os, sys
listed = set(open(sys.argv[1]).read().split())
tests = json.load(sys.stdin)["tests"]
missing = sorted({os.path.basename(t["command"][0]) for t in tests if t.get("command")} - listed)
if not tests or missing:
    sys.exit("%s: %d tests selected; not built by it: %s (tests/CMakeLists.txt: tern_ci_target)"
             % (sys.argv[2], len(tests), " ".join(missing)))
print("%s builds the executables of all %d tests its stage selects" % (sys.argv[2], len(tests)))
' "$dir/tests/$target.txt" "$target"
}

# The sanitizer builds, with line tables only (-g1: every report's frames,
# inlined ones too, still have their file:line; compiles ~25% faster than -g):
# AddressSanitizer's at -O1, the level its authors advise (two library files
# compiled 30-45% faster than at -O2, 2026-12-05, though the stage's whole
# build gained less; its tests mostly wait on their peers); ThreadSanitizer's
# at -O2 (its tests compute more than they wait).
# sanitizer_build LEVEL: their cmake arguments, in build_args.
sanitizer_build() {
  build_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-$1 -g1 -DNDEBUG"
              "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-$1 -g1 -DNDEBUG" -DTERN_BUILD_BINDINGS=OFF)
}

if [ "${1:-}" = "--sanitize" ]; then
  # Without CUDA: nvcc's host code takes no sanitizer flags, so the CUDA
  # sources only cost the build (8 .cu files of the library, 2 of the tests:
  # ~2 min of nvcc, 2026-12-04) and added two tests of uninstrumented code
  # (NvccElementMath, and CudaMemory, not run without a device); the plain
  # stage runs them.
  sanitizer_build O1
  ./scripts/build.sh build-asan --target tests_core -DTERN_SANITIZE=ON "${build_args[@]}" \
    -DTERN_WITH_CUDA=OFF
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
  # hwloc's PCI plugin (libpciaccess) leaks ~1 KB once per process and is
  # unloaded before LeakSanitizer reports, so no suppression can name it:
  # the sanitizer run discovers without the PCI tree (XML tests still cover it).
  export HWLOC_PLUGINS_BLACKLIST=hwloc_pci
  (cd build-asan && ctest -j"$jobs" -L core -E "$ASAN_EXCLUDE" --output-on-failure)
elif [ "${1:-}" = "--tsan" ]; then
  sanitizer_build O2
  ./scripts/build.sh build-tsan --target tests_tsan -DTERN_TSAN=ON "${build_args[@]}" \
    -DTERN_WITH_CUDA=OFF -DTERN_WITH_UCX=OFF
  # Without UCX: its memory hooks (libucm) crash under TSan (UCX is covered by
  # the plain and ASan runs).  halt_on_error: a report fails the test.
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
  (cd build-tsan && ctest -j"$jobs" -L core -R "$TSAN_TESTS" -E "$TSAN_EXCLUDE" --output-on-failure)
else
  ./scripts/build.sh build
  (cd build && ctest -j"$jobs" --output-on-failure)
  check_excludes "$ASAN_EXCLUDE"
  check_excludes "$TSAN_EXCLUDE"
  check_target build tests_core -L core -E "$ASAN_EXCLUDE"
  check_target build tests_tsan -L core -R "$TSAN_TESTS" -E "$TSAN_EXCLUDE"
fi
