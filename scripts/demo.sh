#!/usr/bin/env bash
# scripts/demo.sh: install dependencies, build, and compare allreduce
# bandwidth of tern, OpenMPI and Gloo side by side on this host (2 and 4 ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh build
exec perf/compare --build build --ranks 2,4 -b 1M -e 64M -n 5 -w 2 "$@"
