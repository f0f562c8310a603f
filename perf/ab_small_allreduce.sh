#!/usr/bin/env bash
# Interleaved A/B of two all_reduce_perf builds on small messages (the host
# path's per-call cost): ROUNDS rounds, each running A then B, 2 ranks (shm),
# 8 B and 4 KiB, 3000 iterations; prints min / quartiles / median per binary.
#   perf/ab_small_allreduce.sh A_ALL_REDUCE_PERF B_ALL_REDUCE_PERF [ROUNDS]
set -euo pipefail
a=$1 b=$2 rounds=${3:-12}
cd "$(dirname "$0")/.."
out=$(mktemp)
for r in $(seq 1 "$rounds"); do
  for which in A B; do
    bin=$a; [ $which = B ] && bin=$b
    tools/ternrun -n 2 "$bin" -b 8 -e 4096 -f 512 -n 3000 -w 300 2>&1 |
      awk -v w=$which '$1=="[0]" && $2 ~ /^[0-9]+$/ {print w, $2, $7}' >>"$out"
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    w, size, t = line.split()
    d[(int(size), w)].append(float(t))
q = lambda v, f: sorted(v)[int(f * (len(v) - 1))]
print("| bytes | binary | min us | q1 | median | q3 | max | runs |")
print("|---|---|---|---|---|---|---|---|")
for (size, w), v in sorted(d.items()):
    print("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %d |" % (size, w, min(v), q(v, .25), statistics.median(v), q(v, .75), max(v), len(v)))
PY
rm -f "$out"
