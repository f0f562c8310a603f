"""Iteration time across a live layer migration (issue 22): for 3 and 4
stages, shm and tcp, flush and async, one run that migrates a layer at batch
--at and one that does not (same seed, interleaved, --repeats times; the migration evens out the
partition, so the batches after it are no slower by themselves), and
per run: the median iteration before the migration, the median during it
(message batch .. completion batch), their ratio, and the largest single
iteration after warm-up over the run's median.  --plot draws every run's
iteration times with the migration window shaded.

  PYTHONPATH=build/python /usr/bin/python3 perf/pipeline/migration_stall.py --plot perf/plots/migration_stall.png
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

from tern.pipeline import Config, run

SETUPS = [(3, "shm"), (3, "tcp"), (4, "shm"), (4, "tcp")]


def migration_for(stages):
    """Stage 1 hands one layer to stage 2: from the partition below to an
    even one, so the run after the migration is no slower by itself."""
    return [1, 2]


def start_partition(stages):
    """Two layers a stage, but stage 1 holds one of stage 2's."""
    return [2, 3, 1] + [2] * (stages - 3)


def one(stages, transport, schedule, migrate, args):
    cfg = Config(stages=stages, layers=2 * stages, partition=start_partition(stages), width=args.width, batch=args.batch, iterations=args.iterations,
                 schedule=schedule, microbatches=args.microbatches, k=1, seed=1, transport=transport,
                 migrate=[[args.at] + migration_for(stages) + [1]] if migrate else [])
    with tempfile.TemporaryDirectory() as out:
        rep = run(cfg, out)
        rep["steps_ms"] = steps_ms(out, stages)
    return rep


def steps_ms(out, stages):
    """The longest time any stage's compute thread spent in the migration's
    own steps (receiving the message, instantiating, pushing, installing,
    switching): the stall it adds, read from the event logs, which a loaded
    host's swings in iteration time do not blur.  FROM's message send runs
    on its link's sender thread and is not counted."""
    worst = 0.0
    for s in range(stages):
        with open(os.path.join(out, f"events-stage{s}.json")) as f:
            evs = [e for e in json.load(f) if e["kind"].startswith("mig_")]
        sent = {id(e) for e in evs if e["kind"] == "mig_msg" and any(x["kind"] == "mig_push" for x in evs)}
        worst = max(worst, sum(e["end"] - e["start"] for e in evs if id(e) not in sent) * 1e3)
    return worst


def stall(rep, at):
    ms = rep["iteration_ms"]
    (m,) = rep["migrations"] or [{"message_iter": at, "done_iter": at + 1}]
    before = ms[1:m["message_iter"]]  # batch 0 pays the warm-up
    during = ms[m["message_iter"]:m["done_iter"] + 1]
    med = statistics.median(ms[1:])
    return {"before_ms": statistics.median(before), "during_ms": statistics.median(during),
            "ratio": statistics.median(during) / statistics.median(before), "max_over_median": max(ms[1:]) / med,
            "window": [m["message_iter"], m["done_iter"]], "iteration_ms": ms, "steps_ms": rep["steps_ms"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=14)
    p.add_argument("--at", type=int, default=7, help="the migration's message batch")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--schedules", default="flush,async")
    p.add_argument("--json", help="write every run here")
    p.add_argument("--plot", help="a PNG of the iteration times")
    args = p.parse_args(argv)
    rows = []
    for rep_i in range(args.repeats):
        for stages, transport in SETUPS:
            for schedule in args.schedules.split(","):
                for migrate in (True, False):  # interleaved: the host's load hits both alike
                    r = stall(one(stages, transport, schedule, migrate, args), args.at)
                    r.update(repeat=rep_i, stages=stages, transport=transport, schedule=schedule, migrate=migrate)
                    rows.append(r)
                    print(f"{rep_i} {stages} {transport:3} {schedule:5} {'migrate' if migrate else 'none   '} "
                          f"before {r['before_ms']:7.2f} during {r['during_ms']:7.2f} ratio {r['ratio']:.3f} "
                          f"max/median {r['max_over_median']:.2f} steps {r['steps_ms']:.2f} ms", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    setups = sorted({(r["stages"], r["transport"], r["schedule"]) for r in rows})
    fig, axes = plt.subplots(len(setups), 1, figsize=(8, 2.2 * len(setups)), sharex=True)
    for ax, (s, t, sch) in zip(axes, setups):
        for r in rows:
            if (r["stages"], r["transport"], r["schedule"]) == (s, t, sch) and r["repeat"] == 0:
                ax.plot(r["iteration_ms"], marker="o" if r["migrate"] else ".",
                        label="migration" if r["migrate"] else "no migration")
                if r["migrate"]:
                    ax.axvspan(r["window"][0] - 0.5, r["window"][1] + 0.5, alpha=0.15)
        ax.set_ylabel("ms")
        ax.set_title(f"{s} stages, {t}, {sch}", fontsize=9)
        ax.legend(fontsize=7)
    axes[-1].set_xlabel("batch")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
