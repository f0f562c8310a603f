#!/usr/bin/env python3
"""Two-level collectives against the flat ring across two emulated hosts (issue 45).

  perf/twolevel_netns.py [--coll all_reduce|all_gather] [--build DIR] [--rate 1gbit] [-b 1M] [-e 64M] [-f 4] [-n 5] [-w 2]
                         [--rounds 3] [--algos ring,twolevel,auto] [--bytes-size 64M] [--ternary]
The first algorithm is the baseline of the ratios (ring). --ternary times the
ternary allreduce (all_reduce_perf -T 1): ring is its flat form, twolevel dense
inside each host and ternary across hosts.

Two hosts are two network namespaces joined by one veth pair, each end shaped
with tc htb to --rate (the hosts' NICs); 2 ranks per host (ranks 0-1 on host 0,
2-3 on host 1: tern groups them by the namespace, shm inside a host, tcp
between). Each algorithm (TERN_ALGO) runs build/perf/<coll>_perf's checked
table, interleaved round by round (the VM swings between phases); the table
gives the median time and busbw per size and the speed-up over the ring. Then
one run per algorithm at --bytes-size counts the bytes each host's NIC sent
(/sys/class/net/<nic>/statistics/tx_bytes, every packet header included) per
allreduce. The namespaces are removed afterwards, whatever happens. Needs root.
"""
import argparse
import importlib.machinery
import os
import secrets
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# perf/compare's helpers: shell calls, rank launching, table parsing, ports.
compare = importlib.machinery.SourceFileLoader("compare", os.path.join(HERE, "compare")).load_module()

RANKS_PER_HOST = 2
ADDRS = ["10.245.0.1", "10.245.0.2"]  # only inside the namespaces made here


class TwoHosts:
    """Namespaces <prefix>-0 and <prefix>-1, one veth pair between them (nic0 / nic1)."""

    def __init__(self, rate, prefix):
        self.prefix = prefix
        compare.cleanup_stale(prefix)
        for i in range(2):
            compare.sh("ip netns add %s" % self.ns(i))
        compare.sh("ip link add nic0 netns %s type veth peer name nic1 netns %s" % (self.ns(0), self.ns(1)))
        for i in range(2):
            inside = "ip netns exec %s " % self.ns(i)
            compare.sh(inside + "ip addr add %s/24 dev nic%d" % (ADDRS[i], i))
            compare.sh(inside + "ip link set nic%d up" % i)
            compare.sh(inside + "ip link set lo up")
            compare.sh(inside + "tc qdisc add dev nic%d root handle 1: htb default 1" % i)
            compare.sh(inside + "tc class add dev nic%d parent 1: classid 1:1 htb rate %s" % (i, rate))

    def ns(self, i):
        return "%s-%d" % (self.prefix, i)

    def tx_bytes(self):
        return [int(compare.sh("ip netns exec %s cat /sys/class/net/nic%d/statistics/tx_bytes"
                               % (self.ns(i), i)).stdout) for i in range(2)]

    def close(self):
        for i in range(2):
            compare.sh("ip netns del %s" % self.ns(i), check=False)


def run(a, hosts, algo, sizes_args):
    """Rank 0's table of one run of all_reduce_perf with TERN_ALGO=algo."""
    n = 2 * RANKS_PER_HOST
    root = "%s:%d" % (ADDRS[0], compare.free_port())
    secret = secrets.token_hex(16)
    argv = [os.path.join(a.build, "perf", a.coll + "_perf")] + sizes_args + (["-T", "1"] if a.ternary else [])
    env = lambda r: dict(TERN_RANK=str(r), TERN_NRANKS=str(n), TERN_ROOT=root, TERN_SECRET=secret,
                         TERN_ALGO=algo)

    class PerRankNs:  # compare.run_ranks puts rank r in netns.ns(r)
        def ns(self, r):
            return hosts.ns(r // RANKS_PER_HOST)
    return compare.run_ranks(n, argv, env, PerRankNs())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--coll", default="all_reduce", choices=["all_reduce", "all_gather"])
    p.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    p.add_argument("--rate", default="1gbit")
    compare.add_size_args(p, b="1M", e="64M", f=4, n=5, w=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--algos", default="ring,twolevel,auto")
    p.add_argument("--bytes-size", default="64M")
    p.add_argument("--ternary", action="store_true", help="the ternary allreduce (-T 1)")
    a = p.parse_args()
    if a.ternary and a.coll != "all_reduce":
        sys.exit("--ternary is the allreduce's")
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, tc)")
    algos = a.algos.split(",")
    hosts = TwoHosts(a.rate, "tern45-%d" % os.getpid())
    try:
        table = {algo: {} for algo in algos}  # algo -> size -> [(us, busbw)]
        for rnd in range(a.rounds):
            for algo in algos[rnd % len(algos):] + algos[:rnd % len(algos)]:
                print("# round %d, %s, from %s" % (rnd, algo, time.strftime("%H:%M:%S")), file=sys.stderr)
                out = run(a, hosts, algo, ["-b", a.b, "-e", a.e, "-f", str(a.f), "-n", str(a.n), "-w", str(a.w), "-c", "1"])
                for size, row in compare.parse_rows(out).items():
                    table[algo].setdefault(size, []).append(row)
        # Bytes per call: two runs that differ only in their timed calls, so
        # the bootstrap, warm-up and check cancel out.
        nic = {}
        few, many = 2, 2 + int(a.n)
        print("# byte counts from %s" % time.strftime("%H:%M:%S"), file=sys.stderr)
        for algo in algos:
            sent = []
            for iters in (few, many):
                before = hosts.tx_bytes()
                run(a, hosts, algo, ["-b", a.bytes_size, "-e", a.bytes_size, "-n", str(iters), "-w", "1", "-c", "1"])
                sent.append([y - x for x, y in zip(before, hosts.tx_bytes())])
            # all_reduce_perf runs each timed iteration out of place and in place.
            nic[algo] = [(m - f) / (2 * (many - few)) for f, m in zip(*sent)]
    finally:
        hosts.close()

    print("# %s%s float32%s, 2 hosts x %d ranks, veth shaped to %s; median of %d rounds"
          % (a.coll, " (ternary)" if a.ternary else "", " sum" if a.coll == "all_reduce" else "",
             RANKS_PER_HOST, a.rate, a.rounds))
    head = "%12s" % "size"
    for algo in algos:
        head += " %12s %9s" % (algo + " us", "busbw")
    for algo in algos[1:]:
        head += " %13s" % (algo + "/ring")
    print(head)
    for size in sorted(table[algos[0]]):
        med = {algo: (statistics.median(t for t, _ in table[algo][size]),
                      statistics.median(b for _, b in table[algo][size])) for algo in algos}
        line = "%12d" % size
        for algo in algos:
            line += " %12.0f %9.3f" % med[algo]
        for algo in algos[1:]:
            line += " %12.2fx" % (med[algos[0]][0] / med[algo][0])
        print(line)
    print("# bytes each host's NIC sent per %s %s (tx_bytes, headers included)" % (a.bytes_size, a.coll))
    for algo in algos:
        print("%10s  host0 %12.0f  host1 %12.0f  (%.2fx the ring's)" % (
            algo, nic[algo][0], nic[algo][1], sum(nic[algo]) / sum(nic[algos[0]])))


if __name__ == "__main__":
    main()
