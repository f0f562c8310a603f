#!/usr/bin/python3
"""perf/plot_phase_ratios.py [--phase slow|fast|all] [--ranks 2] OUT.png RESULTS.json...:
tern's speed-up over the best peer per message size (above 1: tern faster), one line per
collective (the median of the rounds' own ratios, a band from their min to max), from
perf/compare --json runs of one phase of the host, with the targets of the slow phase
drawn as a step: at most 1.5x the peer's time below 8 KiB, at least its busbw from 8 KiB,
1.5x its busbw from 2 MiB.  Several runs of one collective (a busbw run and a latency
run) make one line."""
import argparse
import json
import statistics

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

TARGETS = [(0, 1 / 1.5), (8 << 10, 1.0), (2 << 20, 1.5)]  # (from size, speed-up at least)


def series(paths, phase, ranks):
    """{collective: (sizes, medians, lows, highs, rounds)} from compare JSONs; where two runs
    of one collective share a size, the later file's cell stands (e.g. a latency run with
    more iterations after a busbw run); rounds: the most rounds any of its files had in
    the phase."""
    cells, rounds = {}, {}
    for path in paths:
        data = json.load(open(path))
        res = data["results"][str(ranks)]
        coll = data["coll"] + (", send buffers written (-W 1)" if data.get("written") else "")
        for size, cell in res["speedups"].get(phase, {}).items():
            cells.setdefault(coll, {})[int(size)] = cell["ratios"]
        seen = sum(1 for lab in res["phases"] if phase == "all" or lab == phase)
        rounds[coll] = max(rounds.get(coll, 0), seen)
    out = {}
    for coll, by_size in cells.items():
        sizes = sorted(by_size)
        r = [by_size[s] for s in sizes]
        out[coll] = (sizes, [statistics.median(x) for x in r], [min(x) for x in r], [max(x) for x in r],
                     rounds[coll])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", default="slow", choices=["slow", "fast", "all"])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("out")
    ap.add_argument("json", nargs="+")
    a = ap.parse_args()
    fig, ax = plt.subplots(figsize=(8.5, 5))
    top = 0
    for coll, (sizes, med, lo, hi, rounds) in series(a.json, a.phase, a.ranks).items():
        line, = ax.plot(sizes, med, marker="o", ms=3, label="%s (%d rounds)" % (coll, rounds))
        ax.fill_between(sizes, lo, hi, color=line.get_color(), alpha=0.12)
        top = max(top, max(sizes))
    xs = [8] + [start for start, _ in TARGETS[1:]] + [max(top, TARGETS[-1][0]) * 2]
    ys = [want for _, want in TARGETS] + [TARGETS[-1][1]]
    ax.step(xs, ys, where="post", color="black", ls="--", lw=1.2, label="target")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%gx" % v))
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("tern's speed-up over the best peer")
    ax.set_title("%d ranks, one host, %s" % (a.ranks, "every round" if a.phase == "all" else a.phase + " phase rounds only"))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
