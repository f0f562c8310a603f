#!/usr/bin/python3
"""Predicted against measured batch time for every (m, K) of pipeline_perf.py's sweeps.

    /usr/bin/python3 perf/pipeline/plot_predicted.py OUT_DIR [--max-m 8] --png FILE

OUT_DIR is pipeline_perf.py's --out: one sN-LINK/report.json per setup.  One
point per (m, K) and setup (its median measured time against the planner's
median prediction), the planner's pick circled, the diagonal and the 10%
band around it: a point outside the band is a prediction the targets count
as missed.
"""
import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_perf import MODEL, every_candidate, summarise  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--max-m", type=int, default=8)
    ap.add_argument("--png", required=True)
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 6))
    top = 0
    for path in sorted(glob.glob(os.path.join(a.out, "s*-*", "report.json"))):
        setup = os.path.basename(os.path.dirname(path))  # s3-1: 3 stages, link 1
        with open(path) as f:
            rows, pick = summarise(json.load(f), every_candidate(MODEL["batch"], a.max_m))
        stages, link = setup[1:].split("-", 1)
        xs = [r[2] for r in rows.values()]
        ys = [r[0] for r in rows.values()]
        dots = ax.scatter(xs, ys, s=18, label=f"{stages} stages, link {link}")
        ax.scatter([rows[pick][2]], [rows[pick][0]], s=120, facecolors="none",
                   edgecolors=dots.get_facecolor()[0], linewidths=1.5)
        top = max(top, max(xs), max(ys))
    if not top:
        sys.exit(f"no sN-LINK/report.json under {a.out}")
    line = [0, top * 1.05]
    ax.plot(line, line, color="black", linewidth=0.8)
    ax.fill_between(line, [v * 0.9 for v in line], [v * 1.1 for v in line], color="grey", alpha=0.15,
                    label="within 10%")
    ax.set_xlabel("predicted ms per batch (planner, median)")
    ax.set_ylabel("measured ms per batch (median)")
    ax.set_title("Pipeline planner: predicted vs measured, every (m, K); circled: the pick", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(a.png)


if __name__ == "__main__":
    main()
