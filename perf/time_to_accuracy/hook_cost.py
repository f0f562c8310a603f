#!/usr/bin/python3
"""perf/time_to_accuracy/hook_cost.py [--link 1gbit] [--count 5824522]

What one gradient allreduce costs through the torch backend, 2 ranks as
hosts (namespaces, tc htb): dense dist.all_reduce, ternary without and with
error feedback; median of 8 calls each, milliseconds.  The default count is
the MLP's gradient.  (As a rank: hook_cost.py RANK N STORE COUNT.)
"""
import argparse
import importlib.machinery
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def rank_main(rank, n, store, count):
    import torch
    import torch.distributed as dist
    import tern.torch
    torch.set_num_threads(1)
    dist.init_process_group("tern", init_method="file://" + store, rank=rank, world_size=n)
    pg = tern.torch.tern_group()
    x = torch.randn(count)
    res = {}
    for name in ("dense", "ternary", "ternary-ef"):
        if name != "dense":
            pg.set_ternary_config(seed=1, block=256, clip=0.0, error_feedback=(name == "ternary-ef"), min_bytes=0)
        ts = []
        for _ in range(8):
            dist.barrier()
            t = time.perf_counter()
            if name == "dense":
                dist.all_reduce(x)
            else:
                pg.allreduce_ternary(x, 1).get_future().wait()
            ts.append(time.perf_counter() - t)
        res[name] = 1e3 * sorted(ts)[len(ts) // 2]
    if rank == 0:
        print(json.dumps(res))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--link", default="1gbit")
    ap.add_argument("--count", type=int, default=5824522)
    a = ap.parse_args()
    compare = importlib.machinery.SourceFileLoader("compare", os.path.join(ROOT, "perf", "compare")).load_module()
    netns = compare.Netns(2, a.link, prefix="terntah%d" % os.getpid())
    tmp = tempfile.mkdtemp(prefix="tern-tta-")
    try:
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"), OMP_NUM_THREADS="1")
        procs = [subprocess.Popen(["ip", "netns", "exec", netns.ns(r), sys.executable, os.path.abspath(__file__),
                                   str(r), "2", os.path.join(tmp, "store"), str(a.count)], env=env)
                 for r in range(2)]
        for p in procs:
            p.wait(timeout=300)
    finally:
        netns.close()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1].isdigit():
        rank_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        main()
