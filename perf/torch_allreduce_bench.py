#!/usr/bin/python3
"""dist.all_reduce through backend "tern" vs "gloo", side by side in one run.

    PYTHONPATH=build/python /usr/bin/python3 perf/torch_allreduce_bench.py [-n 2] [-b 1M] [-e 256M] [--iters 10]

Both process groups live in the same processes (gloo the default group,
tern a new_group), over the same pre-faulted float32 buffer, and sizes
alternate between them so neither gets a warmer machine.  Prints an
nccl-tests-style table: time per call and busbw (2(n-1)/n x bytes / time)
for each backend, and tern/gloo.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))
import tern.torch  # noqa: E402,F401 - registers "tern"


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def time_allreduce(t, group, iters, warmup):
    for _ in range(warmup):
        dist.all_reduce(t, group=group)
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - start) / iters


def worker(rank, n, store, sizes, iters, warmup, out):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=n)
    groups = {"tern": dist.new_group(backend="tern"), "gloo": None}
    buf = torch.ones(max(sizes) // 4)  # touched once: first-touch cost stays out
    rows = []
    for size in sizes:
        t = buf[:size // 4]
        row = [size]
        for name, g in groups.items():
            t.fill_(1.0)
            sec = time_allreduce(t, g, iters, warmup)
            row.append(sec)
        rows.append(row)
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("-b", default="1M")
    ap.add_argument("-e", default="256M")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    sizes, s = [], parse_size(a.b)
    while s <= parse_size(a.e):
        sizes.append(s)
        s *= 2
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    store = os.path.join(tempfile.mkdtemp(prefix="tern-bench-"), "store")
    mp.start_processes(worker, args=(a.n, store, sizes, a.iters, a.warmup, out), nprocs=a.n,
                       start_method="spawn")
    rows = out.get()
    factor = 2.0 * (a.n - 1) / a.n
    print("# dist.all_reduce float32 sum, %d processes, torch %s, iters %d" % (a.n, torch.__version__, a.iters))
    print("%12s %12s %10s %12s %10s %10s" % ("size(B)", "tern(us)", "tern GB/s", "gloo(us)", "gloo GB/s",
                                             "tern/gloo"))
    for size, tt, tg in rows:
        bt, bg = factor * size / tt / 1e9, factor * size / tg / 1e9
        print("%12d %12.1f %10.3f %12.1f %10.3f %9.2fx" % (size, tt * 1e6, bt, tg * 1e6, bg, bt / bg))


if __name__ == "__main__":
    main()
