#!/usr/bin/python3
"""perf/plot_compare.py RESULTS.json OUT.png: busbw vs message size (log x), one line
per library (median over rounds, its best variant per size), one panel per rank count,
from perf/compare --json."""
import json
import statistics
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, out):
    data = json.load(open(src))
    results = data["results"]
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.2), squeeze=False)
    for ax, (n, res) in zip(axes[0], sorted(results.items(), key=lambda kv: int(kv[0]))):
        for g in res["groups"]:
            sizes = sorted({int(s) for rd in res["rounds"] for s in rd.get(g, {})})
            bw = [statistics.median(rd[g][str(s)][1] for rd in res["rounds"] if str(s) in rd.get(g, {}))
                  for s in sizes]
            ax.plot(sizes, bw, marker="o", ms=3, label=g, lw=2.2 if g.startswith("tern") else 1.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title("%s, %s ranks, %s" % (data["coll"], n, data["where"]))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
