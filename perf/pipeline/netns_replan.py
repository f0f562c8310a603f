#!/usr/bin/python3
"""Re-planning under a real link change: 3 stages in network namespaces
(perf/compare's Netns: veth links held by `tc` htb), tern over tcp, the
flush schedule with --plan.  After batch --switch-at `tc class change`
drops every link from --before to --after; the runtime's probe sees it at a
following batch boundary and asks the planner again.  The same run is
repeated keeping the (m, K) the re-planning run chose first (no planner),
alternating, and the batches after the change compared.

    sudo PYTHONPATH=build/python /usr/bin/python3 perf/pipeline/netns_replan.py \\
        [--before 1gbit --after 100mbit] [--iterations 60] [--switch-at 20] [--repeats 2]

Needs root (ip netns, tc); without it, it says so and exits 77 (skipped).
"""
import argparse
import importlib.machinery
import json
import os
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from migration_stall import device_ms  # noqa: E402
from pipeline_perf import MODEL  # noqa: E402 - the same model as the planner sweep
from tern.pipeline import Config, run  # noqa: E402


def wait_for_batch(progress, batch, worker):
    while worker.is_alive():
        try:
            with open(progress) as f:
                if int(f.read() or -1) >= batch:
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.005)


def last_batch(progress):
    with open(progress) as f:
        return int(f.read())


def one_run(compare, a, fixed, out):
    """One run; fixed: None to plan and re-plan, else the (m, K) to keep."""
    ns = compare.Netns(3, a.before, prefix="ternpr%d" % os.getpid())
    progress = os.path.join(out, "progress")
    try:
        plan = dict(plan=True, microbatches=2, k=1) if fixed is None else dict(microbatches=fixed[0], k=fixed[1])
        cfg = Config(stages=3, schedule="flush", iterations=a.iterations, replan_threshold=a.threshold,
                     timeout=120, transport="tcp", netns=[ns.ns(r) for r in range(3)], progress=progress,
                     root="%s:%d" % (ns.addrs[0], 29621), emulate_ms=device_ms(a.emulate_ms), **plan,
                     **dict(MODEL, batch=a.batch, width=a.width))
        result = {}
        worker = threading.Thread(target=lambda: result.update(report=run(cfg, out)))
        worker.start()
        wait_for_batch(progress, a.switch_at, worker)
        # Changing every link's rate takes a tc call per link, and small
        # batches go on meanwhile: the probe at the boundary after batch
        # `before` is the first that may see it, and every link is at the
        # new rate from the batch after `switched`.
        before = last_batch(progress)
        ns.set_rate(a.after)
        switched = last_batch(progress)
        worker.join()
        result["report"]["switched_before"], result["report"]["switched_after"] = before, switched
        with open(os.path.join(out, "report.json"), "w") as f:
            json.dump(result["report"], f)
        return result["report"]
    finally:
        ns.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--emulate-ms", metavar="FWD:BWD[@SAMPLES]", help="every layer on an emulated device (tern.emulate)")
    ap.add_argument("--before", default="1gbit")
    ap.add_argument("--after", default="100mbit")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--switch-at", type=int, default=20, help="change the rate once this batch is done")
    ap.add_argument("--threshold", type=float, default=0.5, help="the runtime's re-plan threshold")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch", type=int, default=MODEL["batch"], help="samples per batch (activations scale with it)")
    ap.add_argument("--width", type=int, default=MODEL["width"])
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("netns_replan: skipped: needs root for ip netns and tc (run it with sudo).")
        sys.exit(77)
    compare = importlib.machinery.SourceFileLoader("compare", os.path.join(ROOT, "perf", "compare")).load_module()
    print("| repeat | run | plan before | plan after | decisions (batch: reason -> pick) | median ms before | "
          "median ms after (from switch + 5) |")
    print("|---|---|---|---|---|---|---|")
    for rep in range(a.repeats):
        replanned = one_run(compare, a, None, tempfile.mkdtemp(prefix="tern-netns-replan-"))
        kept = one_run(compare, a, replanned["plan_by_iter"][1], tempfile.mkdtemp(prefix="tern-netns-keep-"))
        for name, r in (("re-plan", replanned), ("keep", kept)):
            ms = r["iteration_ms"]
            before = statistics.median(ms[2:a.switch_at + 1])
            after = statistics.median(ms[a.switch_at + 5:])
            decisions = "; ".join(f"{d['iteration']}: {d['reason']} -> {d.get('pick')}"
                                  + (f" ({d['kept']})" if "kept" in d else "") for d in r["decisions"])
            print(f"| {rep} | {name} | {r['plan_by_iter'][1]} | {r['plan_by_iter'][-1]} | {decisions or '-'} | "
                  f"{before:.1f} | {after:.1f} |", flush=True)


if __name__ == "__main__":
    main()
