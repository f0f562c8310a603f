#!/usr/bin/python3
"""perf/plot_compare.py RESULTS.json OUT.png: busbw vs message size (log x), one line
per library (median over rounds, its best variant per size), one panel per rank count,
from perf/compare --json.  perf/compare labels each round by the host's phase
(core_pingpong's one-way time): a panel per rank count and phase, from that phase's
rounds, titled with it and its range of one-way times."""
import json
import statistics
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def panels(results):
    """[(ranks, phase title, rounds, groups)]: per rank count, one panel per phase that whole
    rounds saw, from those rounds only (a round whose phase flipped is in none); one
    untitled panel of every round when none saw a whole phase (or none was read)."""
    out = []
    for n, res in sorted(results.items(), key=lambda kv: int(kv[0])):
        labels = res.get("phases") or [None] * len(res["rounds"])
        ns = res.get("phase_ns") or [(None, None)] * len(res["rounds"])
        kinds = [k for k in ("fast", "slow") if k in labels] or [None]
        for kind in kinds:
            keep = [i for i, lab in enumerate(labels) if kind is None or lab == kind]
            seen = [x for i in keep for x in ns[i] if x]
            title = ("%s phase, %d of %d rounds, %.0f-%.0f ns one way" % (kind, len(keep), len(labels), min(seen),
                                                                         max(seen)) if kind else "")
            out.append((n, title, [res["rounds"][i] for i in keep], res["groups"]))
    return out


def main(src, out):
    data = json.load(open(src))
    cells = panels(data["results"])
    fig, axes = plt.subplots(1, len(cells), figsize=(6 * len(cells), 4.2), squeeze=False)
    for ax, (n, title, rounds, groups) in zip(axes[0], cells):
        for g in groups:
            sizes = sorted({int(s) for rd in rounds for s in rd.get(g, {})})
            bw = [statistics.median(rd[g][str(s)][1] for rd in rounds if str(s) in rd.get(g, {}))
                  for s in sizes]
            ax.plot(sizes, bw, marker="o", ms=3, label=g, lw=2.2 if g.startswith("tern") else 1.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title("%s, %s ranks, %s%s" % (data["coll"], n, data["where"], "\n" + title if title else ""),
                     fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
