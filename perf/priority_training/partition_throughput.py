#!/usr/bin/python3
"""perf/priority_training/partition_throughput.py [--link 1gbit] [--mib 40] [--rounds 4] [--load 0,0.5]

How fast tern moves a model's gradients over the priority benchmark's
links when they go the way PriorityScheduler sends them (partitions of
1 MiB with a few in flight, two levels, the more urgent one overtaking)
against one allreduce of the whole buffer, with and without a busy
thread beside each rank.  2 ranks, each a host: its own network namespace
on perf/compare's veth pair, shaped with tc htb to --link.

--load F: each rank also runs a thread that computes (torch elementwise
math on 24 MB) for F of every 20 ms, as the optimizer updates and the
host's share of a training step do; F = 0.5 takes half a core per rank,
all of this host's 2 cores for the two "hosts" together with their
network stacks.  The table gives MB/s of the buffer per variant (the best
of --rounds after the first, and the spread): what the link carries
with the cores free against what it carries when two emulated hosts share
them.  Needs root (ip netns); run from a built tree.
"""
import argparse
import importlib.machinery
import json
import os
import secrets
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PARTITION = 1 << 20


def variants(dist, set_priority, buf):
    """{name: fn()} for one buffer."""
    parts = buf.numel() * 4 // PARTITION
    step = buf.numel() // parts

    def credit(k, first=0):
        """Partitions first.. issued with at most k in flight; the last k returned unwaited."""
        q = []
        for i in range(first, parts):
            if len(q) >= k:
                q.pop(0).wait()
            q.append(dist.all_reduce(buf[i * step:(i + 1) * step], async_op=True))
        return q

    def one_level():
        for w in credit(4):
            w.wait()

    def two_levels():
        # the bulk level's first partitions are in flight when a more urgent
        # level's start and overtake them (PriorityScheduler's two big layers)
        set_priority(7)
        bulk = [dist.all_reduce(buf[i * step:(i + 1) * step], async_op=True) for i in range(4)]
        set_priority(6)
        for w in credit(4, first=4):
            w.wait()
        for w in bulk:
            w.wait()
        set_priority(7)

    return {"whole": lambda: dist.all_reduce(buf), "1 MiB x 4 in flight": one_level,
            "1 MiB, two levels": two_levels}


def busy(share, torch, stop):
    a, b = torch.ones(6 << 20), torch.ones(6 << 20)
    while not stop.is_set():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.020 * share:
            a.mul_(0.999).add_(b)
        time.sleep(0.020 * (1 - share))


def rank_main(cfg):
    import torch
    import torch.distributed as dist
    import tern.torch  # noqa: F401 - registers backend "tern"
    from tern import set_priority
    rank = int(os.environ["BENCH_RANK"])
    torch.set_num_threads(1)
    dist.init_process_group("tern", init_method="file://" + cfg["store"], rank=rank, world_size=2)
    buf = torch.ones(cfg["mib"] << 18)
    out = []
    for load in cfg["loads"]:
        stop = threading.Event()
        hog = threading.Thread(target=busy, args=(load, torch, stop), daemon=True) if load else None
        if hog:
            hog.start()
        for name, fn in variants(dist, set_priority, buf).items():
            times = []
            for _ in range(cfg["rounds"]):
                dist.barrier()
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            out.append(dict(load=load, variant=name, seconds=times))
        stop.set()
        if hog:
            hog.join()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--link", default="1gbit")
    ap.add_argument("--mib", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--load", default="0,0.5", help="busy share of each rank's extra thread, per run")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    compare = importlib.machinery.SourceFileLoader("compare", os.path.join(ROOT, "perf", "compare")).load_module()
    netns = compare.Netns(2, a.link, prefix="ternpp%d" % os.getpid())
    try:
        cfg = dict(store=os.path.join(tempfile.mkdtemp(prefix="tern-pp-"), "store"), mib=a.mib,
                   rounds=a.rounds, loads=[float(x) for x in a.load.split(",")])
        env = dict(PYTHONPATH=os.path.join(a.build, "python"), OMP_NUM_THREADS="1",
                   TERN_SECRET=secrets.token_hex(16))
        argv = ["/usr/bin/python3", os.path.abspath(__file__), "--rank", json.dumps(cfg)]
        rows = json.loads(compare.run_ranks(2, argv, lambda r: dict(env, BENCH_RANK=str(r)), netns, 900)
                          .strip().splitlines()[-1])
    finally:
        netns.close()
    print("| busy share per rank | variant | MB/s (best) | min-max MB/s | x the whole buffer's |")
    print("|---|---|---|---|---|")
    whole = {}
    for r in rows:
        rates = [a.mib * (1 << 20) / s / 1e6 for s in r["seconds"][1:]]
        whole.setdefault(r["load"], max(rates))
        print("| %.2f | %s | %.0f | %.0f-%.0f | %.2f |" % (r["load"], r["variant"], max(rates), min(rates),
                                                         max(rates), max(rates) / whole[r["load"]]))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--rank":
        rank_main(json.loads(sys.argv[2]))
    else:
        main()
