#!/usr/bin/env python3
"""perf/engine_before_after.py OLD_ALL_REDUCE_PERF NEW_ALL_REDUCE_PERF: allreduce 8 B - 128 MiB, 2 and 4 ranks,
each binary run twice, interleaved, best of two per size; prints time and busbw side by side.
Build the old one from an earlier commit in a worktree (git worktree add ../base <commit>)."""
import subprocess, sys
def run(binary, n):
    out = subprocess.run(["tools/ternrun", "-n", str(n), binary, "-b", "8", "-e", "256M", "-f", "4", "-n", "20", "-w", "5"],
                         capture_output=True, text=True, timeout=900).stdout
    rows = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) > 12 and p[0] == "[0]" and p[1].isdigit():
            rows[int(p[1])] = (float(p[6]), float(p[8]), float(p[10]), float(p[12]))  # oop time,busbw, ip time, busbw
    return rows
for n in (2, 4):
    before = run(sys.argv[1], n)
    after = run(sys.argv[2], n)
    before2 = run(sys.argv[1], n)
    after2 = run(sys.argv[2], n)
    print("# %d ranks, shm, float32 sum, out-of-place (time us / busbw GB/s), best of two runs each" % n)
    print("%12s %12s %12s %10s %10s %8s" % ("bytes", "before(us)", "after(us)", "before GB/s", "after GB/s", "after/before"))
    for b in sorted(after):
        tb = min(before[b][0], before2[b][0]); ta = min(after[b][0], after2[b][0])
        bb = max(before[b][1], before2[b][1]); ba = max(after[b][1], after2[b][1])
        print("%12d %12.2f %12.2f %10.2f %10.2f %8.2f" % (b, tb, ta, bb, ba, tb / ta))
    sys.stdout.flush()
