#!/usr/bin/env bash
# scripts/demo.sh: install dependencies, build, and compare allreduce
# bandwidth of tern, OpenMPI (default and tuned: the best of its known
# settings per size), MPICH and Gloo side by side on this host (2 and 4
# ranks), with a plot in build/demo_allreduce.png.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh build
exec perf/compare --build build --ranks 2,4 -b 1M -e 64M -n 5 -w 2 \
  --peers openmpi,openmpi-tuned,mpich,gloo --plot build/demo_allreduce.png "$@"
