"""Throughput across a rebalance: stage 1 of 3 slowed --factor
times for the whole run, `--rebalance` on, starting from the even partition;
beside it (interleaved, --repeats times) the same slowed run started on the
partition the rebalance ended on, without rebalancing.  Per rebalance run:
the median batch period (one batch's first start to the next one's: the
batch and its boundary, i.e. 1 / throughput) before the first move's
message and after the last migration completed, their ratio (target
>= 1.3x), and the after-median over the balanced-start run's median
(target within 10%).  --plot draws the periods of the first repeat with the
migration windows shaded.

  PYTHONPATH=build/python /usr/bin/python3 perf/pipeline/rebalance_throughput.py --repeats 3 \\
      --json perf/pipeline/rebalance_throughput.json --plot perf/plots/rebalance_throughput.png
"""
import argparse
import statistics
import sys
import tempfile

from migration_stall import device_ms, finish  # beside this script
from tern.pipeline import Config, run


def one(args, transport, rebalance, partition, schedule="flush"):
    cfg = Config(stages=3, layers=args.layers, partition=partition, width=args.width, batch=args.batch,
                 iterations=args.iterations, schedule=schedule, microbatches=args.microbatches, k=1, seed=1,
                 transport=transport, slow={"1": args.factor}, rebalance=rebalance, emulate_ms=device_ms(args.emulate_ms))
    with tempfile.TemporaryDirectory() as out:
        return run(cfg, out)


def throughput(rep):
    """(median period before the first move, after the last migration, windows)."""
    p, migs = rep["period_ms"], rep["migrations"]
    if not migs:
        return statistics.median(p[1:]), None, []
    first, last = migs[0]["message_iter"], migs[-1]["done_iter"]
    after = p[last + 1:]
    return (statistics.median(p[1:first]), statistics.median(after) if after else None,
            [[m["message_iter"], m["done_iter"]] for m in migs])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--layers", type=int, default=9)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--factor", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--transports", default="shm,tcp")
    p.add_argument("--schedules", default="flush", help="flush, async or both (flush,async)")
    p.add_argument("--emulate-ms", metavar="FWD:BWD",
                   help="every layer on an emulated device (tern.emulate; --factor then slows stage 1's device)")
    p.add_argument("--json")
    p.add_argument("--plot")
    args = p.parse_args(argv)
    even = [args.layers // 3 + (1 if s < args.layers % 3 else 0) for s in range(3)]
    rows = []
    setups = [(sch, tr) for sch in args.schedules.split(",") for tr in args.transports.split(",")]
    for rep_i in range(args.repeats):
        for schedule, transport in setups:
            re = one(args, transport, True, even, schedule)
            before, after, windows = throughput(re)
            final = re["partition_by_iter"][-1]
            # The balanced start: the partition the rebalance found (interleaved with it).
            bal = one(args, transport, False, final, schedule)
            balanced = statistics.median(bal["period_ms"][1:])
            row = {"repeat": rep_i, "schedule": schedule, "transport": transport, "before_ms": before,
                   "after_ms": after, "speedup": before / after if after else None, "balanced_ms": balanced,
                   "after_over_balanced": after / balanced if after else None, "final_partition": final,
                   "windows": windows, "decisions": [e for e in re["rebalance"] if e["action"] != "hold"],
                   "overruns": sum(re.get("overruns", [])) + sum(bal.get("overruns", [])),
                   "period_ms": re["period_ms"], "balanced_period_ms": bal["period_ms"]}
            rows.append(row)
            print(f"{rep_i} {schedule:5} {transport:3} partition {even} -> {final} windows {windows} before "
                  f"{before:7.2f} after {after or 0:7.2f} speedup {row['speedup'] or 0:.3f} balanced-start "
                  f"{balanced:7.2f} after/balanced {row['after_over_balanced'] or 0:.3f} overruns {row['overruns']}",
                  flush=True)
    for schedule, transport in setups:
        got = [r for r in rows if (r["schedule"], r["transport"]) == (schedule, transport) and r["speedup"]]
        if got:
            sp, ab = [r["speedup"] for r in got], [r["after_over_balanced"] for r in got]
            print(f"{schedule} {transport}: speedup median {statistics.median(sp):.3f} ({min(sp):.3f}..{max(sp):.3f}), "
                  f"after/balanced median {statistics.median(ab):.3f} ({min(ab):.3f}..{max(ab):.3f}), "
                  f"{len(got)} of {args.repeats} runs rebalanced")
    return finish(args, {"runs": rows}, lambda path: plot(rows, path))


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    first = [r for r in rows if r["repeat"] == 0]
    fig, axes = plt.subplots(len(first), 1, figsize=(8, 2.6 * len(first)), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], first):
        ax.plot(r["period_ms"], marker="o", label="--rebalance, from the even partition")
        ax.plot(r["balanced_period_ms"], marker=".", label=f"started on {r['final_partition']}")
        for a, b in r["windows"]:
            ax.axvspan(a - 0.5, b + 0.5, alpha=0.15)
        ax.set_yscale("log")  # a loaded host's preemptions are 10-50x a batch
        ax.set_ylabel("batch period, ms")
        ax.set_title(f"stage 1 slowed, {r.get('schedule', 'flush')}, {r['transport']}", fontsize=9)
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("batch")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
