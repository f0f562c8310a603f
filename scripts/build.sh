#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR] [--target T]... [extra cmake args...]: configure
# and build tern (everything, or only the targets named, e.g. tests_core).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
targets=()
args=()
while (($#)); do
  if [ "$1" = "--target" ]; then
    targets+=(--target "$2")
    shift 2
  else
    args+=("$1")
    shift
  fi
done
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${args[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
