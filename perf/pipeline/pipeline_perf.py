#!/usr/bin/python3
"""Predicted vs measured iteration time of tern.pipeline's flush schedule,
and the planner's pick vs every (m, K) measured on the same run.

    PYTHONPATH=build/python /usr/bin/python3 perf/pipeline/pipeline_perf.py \\
        [--stages 3 4] [--links shm 1 0.1] [--netns] [--rounds 4] [--max-m 8] [--out DIR] [--plot]

For each stage count and link (shm: no emulation; a number: the links'
injected serialisation delay at that Gbit/s over shm, or with --netns real
namespaces joined by veth links that `tc` holds at that rate, over tcp) one
run goes through every (m, K) of the batch with m <= --max-m in turn,
`--rounds` times interleaved (one batch each, after a warm-up batch).  At every batch
boundary the runtime measures, builds the planner's model and predicts the
next batch's time for the (m, K) it will run; the planner also names its
pick (among the splits tried).  Per (m, K): median and fastest measured
(other work on a shared host only ever adds time), median predicted, their
ratios; then the pick's measured time vs the fastest measured, and vs 1F1B
and GPipe at the pick's m.  Prints markdown tables; --out keeps the reports (and with --plot
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
from migration_stall import device_ms  # noqa: E402 - beside this script

MODEL = dict(layers=12, width=512, batch=32, lr=0.01, seed=7)


def every_candidate(batch, max_m):
    return [[m, k] for m in divisors(batch) if m <= max_m for k in range(1, m + 1)]


def run_sweep(stages, link, rounds, netns, out, max_m, emulate_ms=None):
    cands = every_candidate(MODEL["batch"], max_m)
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
                 # a decision (the planner's pick, logged) at every boundary, from the latest model
                 microbatches=2, k=1, replan_threshold=1e-12, timeout=120, emulate_ms=emulate_ms, **extra, **MODEL)
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
    rows = {mk: (statistics.median(v["measured"]), min(v["measured"]), statistics.median(v["predicted"]))
            for mk, v in by.items() if v["measured"]}
    # The planner's pick among the (m, K) tried (the sweep's list): its own
    # choice, or, when that split lies beyond --max-m, its best among those.
    last = report["decisions"][-1]
    pick = tuple(last["pick"])
    if pick not in rows:
        tried = [c for c in last["candidates"] if c["feasible"] and (c["microbatches"], c["k"]) in rows]
        best = min(tried, key=lambda c: c["iteration_ms"])
        pick = (best["microbatches"], best["k"])
    return rows, pick


def table(stages, link, rows, pick):
    lines = [f"\n### {stages} stages, link {link}\n",
             "| m | K | measured ms: median | min | predicted ms (median) | predicted/median | predicted/min |",
             "|---|---|---|---|---|---|---|"]
    fastest = min(rows, key=lambda mk: rows[mk][0])
    fastest_min = min(rows, key=lambda mk: rows[mk][1])
    for (m, k), (med, low, pred) in sorted(rows.items()):
        tag = " **pick**" if (m, k) == pick else ""
        tag += " fastest" if (m, k) == fastest else ""
        lines.append(f"| {m} | {k}{tag} | {med:.2f} | {low:.2f} | {pred:.2f} | {pred / med:.2f} | {pred / low:.2f} |")
    pm = pick[0]
    within = [abs(r[2] / r[0] - 1) <= 0.1 for r in rows.values()]
    within_min = [abs(r[2] / r[1] - 1) <= 0.1 for r in rows.values()]
    lines.append(f"\npick {pick}: median {rows[pick][0]:.2f} ms vs fastest median {fastest} {rows[fastest][0]:.2f} ms "
                 f"(x{rows[pick][0] / rows[fastest][0]:.2f}); min {rows[pick][1]:.2f} vs fastest min {fastest_min} "
                 f"{rows[fastest_min][1]:.2f} (x{rows[pick][1] / rows[fastest_min][1]:.2f}); "
                 f"1F1B at m={pm}: {rows[(pm, 1)][0]:.2f}, GPipe at m={pm}: {rows[(pm, pm)][0]:.2f} (medians). "
                 f"Predicted within 10% of the median for {sum(within)}/{len(within)}, of the min for "
                 f"{sum(within_min)}/{len(within_min)}.")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[3, 4])
    ap.add_argument("--links", nargs="+", default=["shm", "1", "0.1"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--max-m", type=int, default=8, help="splits up to this many micro-batches (all K each)")
    ap.add_argument("--netns", action="store_true", help="numbers are tc rates between namespaces (root only)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", action="store_true")
    ap.add_argument("--emulate-ms", metavar="FWD:BWD[@SAMPLES]",
                    help="every layer on an emulated device (tern.emulate), e.g. 4:8@32: per 32 samples, scaled "
                         "to each micro-batch")
    a = ap.parse_args()
    if a.netns and os.geteuid() != 0:
        sys.exit("--netns needs root (ip netns, tc): run it as root or leave it out.")
    out = a.out or tempfile.mkdtemp(prefix="tern-pipeline-perf-")
    print(f"model: {MODEL}; every (m <= {a.max_m}, K) of batch {MODEL['batch']}, {a.rounds} rounds interleaved; "
          f"links {'netns/tc + tcp' if a.netns else 'shm with injected delay'}"
          + (f"; layers on an emulated device, {a.emulate_ms} ms" if a.emulate_ms else "; compute on the host"))
    for stages in a.stages:
        for link in a.links:
            d = os.path.join(out, f"s{stages}-{link}")
            report, cands = run_sweep(stages, link, a.rounds, a.netns, d, a.max_m, device_ms(a.emulate_ms))
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
