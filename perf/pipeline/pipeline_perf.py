#!/usr/bin/python3
"""Predicted vs measured iteration time of tern.pipeline's flush schedule,
and the planner's pick vs every (m, K) measured on the same run.

    PYTHONPATH=build/python /usr/bin/python3 perf/pipeline/pipeline_perf.py \\
        [--stages 3 4] [--links shm 1 0.1] [--netns] [--rounds 3] [--out DIR] [--plot]

For each stage count and link (shm: no emulation; a number: the links'
injected serialisation delay at that Gbit/s over shm, or with --netns real
namespaces joined by veth links that `tc` holds at that rate, over tcp) one
run goes through every feasible (m, K) of the batch in turn, `--rounds`
times interleaved (one batch each, after a warm-up batch).  At every batch
boundary the runtime measures, builds the planner's model and predicts the
next batch's time for the (m, K) it will run; the planner also names its
pick.  Per (m, K): median measured, median predicted, their ratio; then the
pick's measured time vs the fastest measured, and vs 1F1B and GPipe at the
pick's m.  Prints markdown tables; --out keeps the reports (and with --plot
a measured Gantt beside the planner's for the pick).
"""
import argparse
import importlib.machinery
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tern.pipeline import Config, run  # noqa: E402
from tern.pipeline.replan import divisors  # noqa: E402

MODEL = dict(layers=12, width=512, batch=32, lr=0.01, seed=7)


def every_candidate(batch):
    return [[m, k] for m in divisors(batch) for k in range(1, m + 1)]


def run_sweep(stages, link, rounds, netns, out):
    cands = every_candidate(MODEL["batch"])
    sweep = [[2, 1]] + cands * rounds  # a warm-up batch first
    extra = {}
    ns = None
    if link != "shm" and netns:
        compare = importlib.machinery.SourceFileLoader("compare", os.path.join(ROOT, "perf", "compare")).load_module()
        ns = compare.Netns(stages, "%dmbit" % round(float(link) * 1000), prefix="ternpp%d" % os.getpid())
        extra = dict(netns=[ns.ns(r) for r in range(stages)], root="%s:%d" % (ns.addrs[0], 29611), transport="tcp")
    elif link != "shm":
        extra = dict(emulate=[[0, float(link)]])
    cfg = Config(stages=stages, schedule="flush", plan=True, sweep=sweep, iterations=len(sweep),
                 microbatches=2, k=1, replan_threshold=1e9, timeout=120, **extra, **MODEL)
    try:
        return run(cfg, out), cands
    finally:
        if ns:
            ns.close()


def summarise(report, cands):
    by = {tuple(c): {"measured": [], "predicted": []} for c in cands}
    for i in range(1, len(report["iteration_ms"])):
        mk = tuple(report["plan_by_iter"][i])
        by[mk]["measured"].append(report["iteration_ms"][i])
        by[mk]["predicted"].append(report["predicted_ms"][i])
    rows = {mk: (statistics.median(v["measured"]), statistics.median(v["predicted"]),
                 (max(v["measured"]) - min(v["measured"])) / statistics.median(v["measured"]))
            for mk, v in by.items() if v["measured"]}
    pick = tuple(report["decisions"][-1]["pick"])
    return rows, pick


def table(stages, link, rows, pick):
    lines = [f"\n### {stages} stages, link {link}\n",
             "| m | K | measured ms (median) | spread | predicted ms | predicted/measured |",
             "|---|---|---|---|---|---|"]
    fastest = min(rows, key=lambda mk: rows[mk][0])
    for (m, k), (meas, pred, spread) in sorted(rows.items()):
        tag = " **pick**" if (m, k) == pick else ""
        tag += " fastest" if (m, k) == fastest else ""
        lines.append(f"| {m} | {k}{tag} | {meas:.2f} | {spread * 100:.0f}% | {pred:.2f} | {pred / meas:.2f} |")
    pm = pick[0]
    errs = [abs(p / m_ - 1) for m_, p, _ in rows.values()]
    lines.append(f"\npick {pick}: measured {rows[pick][0]:.2f} ms, fastest {fastest} {rows[fastest][0]:.2f} ms "
                 f"(pick/fastest {rows[pick][0] / rows[fastest][0]:.3f}); 1F1B at m={pm}: {rows[(pm, 1)][0]:.2f} ms, "
                 f"GPipe at m={pm}: {rows[(pm, pm)][0]:.2f} ms; |predicted/measured - 1|: median "
                 f"{statistics.median(errs) * 100:.1f}%, within 10% for {sum(e <= 0.1 for e in errs)}/{len(errs)} "
                 f"(pick: {abs(rows[pick][1] / rows[pick][0] - 1) * 100:.1f}%)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[3, 4])
    ap.add_argument("--links", nargs="+", default=["shm", "1", "0.1"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--netns", action="store_true", help="numbers are tc rates between namespaces (root only)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", action="store_true")
    a = ap.parse_args()
    if a.netns and os.geteuid() != 0:
        sys.exit("--netns needs root (ip netns, tc): run it as root or leave it out.")
    out = a.out or tempfile.mkdtemp(prefix="tern-pipeline-perf-")
    print(f"model: {MODEL}; every (m, K) of batch {MODEL['batch']}, {a.rounds} rounds interleaved; "
          f"links {'netns/tc + tcp' if a.netns else 'shm with injected delay'}")
    for stages in a.stages:
        for link in a.links:
            d = os.path.join(out, f"s{stages}-{link}")
            report, cands = run_sweep(stages, link, a.rounds, a.netns, d)
            with open(os.path.join(d, "report.json"), "w") as f:
                json.dump(report, f)
            rows, pick = summarise(report, cands)
            print(table(stages, link, rows, pick), flush=True)
            if a.plot:
                from gantt_pair import draw_pair
                draw_pair(d, report, pick, os.path.join(d, "gantt.png"))
                print(f"gantt: {os.path.join(d, 'gantt.png')}")


if __name__ == "__main__":
    main()
