#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds a consumer with
# find_package(tern) and another with pkg-config, and runs both.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -x "$tmp/prefix/bin/ternrun"
test -x "$tmp/prefix/bin/all_reduce_perf"
"$tmp/prefix/bin/tern-k8s" --name i --image i --workers 1 --gpus-per-worker 3 -- p | grep -q "^kind: MPIJob" ||
  { echo "the installed tern-k8s does not render an MPIJob" >&2; exit 1; }
cmake -S "$src" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/cm/consumer"
pc=$(find "$tmp/prefix" -name tern.pc -printf '%h')
cc "$src/consumer.c" -o "$tmp/pc_consumer" $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs tern)
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/pc_consumer"
# The Python package (when built): imports from its install place, finding
# libtern.so through its RPATH (no LD_LIBRARY_PATH).
pkg=$(find "$tmp/prefix" -path '*dist-packages/tern/__init__.py' -printf '%h' | head -1)
if [ -n "$pkg" ]; then
  (cd "$tmp" && env -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$pkg")" /usr/bin/python3 -c \
    'import tern, numpy as np; c = tern.Comm(tern.unique_id(), 1, 0); x = np.ones(3); c.allreduce(x); assert x.sum() == 3')
  if ls "$pkg"/_c10d*.so >/dev/null 2>&1; then
    (cd "$tmp" && env -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$pkg")" /usr/bin/python3 -c \
      'import tern.torch, torch.distributed as dist; assert "TERN" in dist.Backend._plugins')
  fi
  echo "python package ok: $pkg"
fi
echo "install ok"
