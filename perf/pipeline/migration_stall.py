"""Iteration time across a live layer migration: for 3 and 4
stages, shm and tcp, flush and async, one run that migrates a layer at batch
--at and one that does not (same seed, interleaved, --repeats times; the migration evens out the
partition, so the batches after it are no slower by themselves), and
per run: the median iteration before the migration, the median during it
(message batch .. completion batch), their ratio, and the largest single
iteration after warm-up over the run's median; the same ratio for the
period (one batch's first start to the next one's: the batch plus its
boundary, where a flushing migration completes).  The runs without
migration give each figure's noise floor on the same host at the same
time.  At the end, one line per setup over the repeats: the median ratio
and its spread (min..max), the worst single iteration.  --plot draws every
run's iteration times with the migration window shaded.

  PYTHONPATH=build/python /usr/bin/python3 perf/pipeline/migration_stall.py --repeats 5 \
      --json perf/pipeline/migration_stall.json --plot perf/plots/migration_stall.png
  (as root) ... migration_stall.py --setups 3:netns,4:netns --rate 1gbit   # a namespace per stage
  ... migration_stall.py --emulate-ms 4:8   # every layer on an emulated device (tern.emulate)

--emulate-ms FWD:BWD: each layer waits out that device time per micro-batch
asleep, so the stages' compute leaves the host's cores free as an
accelerator's would (the noise floor of 3-4 stages sharing 2 cores for
their CPU math is what hid the migration's effect); the report then
carries the overruns (ops whose math outlasted the device time).
"""
import argparse
import contextlib
import importlib.machinery
import json
import os
import statistics
import sys
import tempfile

from tern.pipeline import Config, run

def device_ms(text):
    """--emulate-ms FWD:BWD[@SAMPLES] as the Config's emulate_ms (None: compute on the host)."""
    from tern import emulate
    if not text:
        return None
    source = emulate.parse_ms(text)
    return [source.fwd_ms, source.bwd_ms] + ([source.samples] if source.samples else [])


def migration_for(stages):
    """Stage 1 hands one layer to stage 2: from the partition below to an
    even one, so the run after the migration is no slower by itself."""
    return [1, 2]


def start_partition(stages):
    """Two layers a stage, but stage 1 holds one of stage 2's."""
    return [2, 3, 1] + [2] * (stages - 3)


def one(stages, transport, schedule, migrate, args):
    with hosts(stages, transport, args.rate) as where, tempfile.TemporaryDirectory() as out:
        cfg = Config(stages=stages, layers=2 * stages, partition=start_partition(stages), width=args.width, batch=args.batch,
                     iterations=args.iterations, schedule=schedule, microbatches=args.microbatches, k=1, seed=1,
                     migrate=[[args.at] + migration_for(stages) + [1]] if migrate else [],
                     emulate_ms=device_ms(args.emulate_ms), **where)
        rep = run(cfg, out)
        rep["steps_ms"], rep["inside_ms"] = steps_ms(out, stages)
    return rep


@contextlib.contextmanager
def hosts(stages, transport, rate):
    """The Config fields that place the stages: one host over `transport`
    (shm, tcp), or with "netns" one network namespace per stage on
    perf/compare's veth star, every link shaped to `rate` by tc htb, tern over
    tcp (needs root).  The namespaces are removed after the run."""
    if transport != "netns":
        yield {"transport": transport}
        return
    here = os.path.dirname(os.path.abspath(__file__))
    compare = importlib.machinery.SourceFileLoader("compare", os.path.join(here, "..", "compare")).load_module()
    ns = compare.Netns(stages, rate, prefix="ternms%d" % os.getpid())
    try:
        yield {"transport": "tcp", "netns": [ns.ns(s) for s in range(stages)], "timeout": 120,
               "root": "%s:%d" % (ns.addrs[0], 29631)}
    finally:
        ns.close()


def steps_ms(out, stages):
    """(all, inside): the longest time any stage's compute thread spent in
    the migration's own steps (receiving the message, instantiating,
    pushing, installing, switching), and the part of it that can delay a
    batch: what overlaps the batch's start (its first op on any stage) to
    this stage's own last op of it.  The rest falls after the stage's own
    part of the batch, where it waits for the others and the boundary
    anyway.  Read from the event logs, which a loaded host's swings in
    iteration time do not blur.  FROM's message send runs on its link's
    sender thread and is not counted."""
    logs = []
    for s in range(stages):
        with open(os.path.join(out, f"events-stage{s}.json")) as f:
            logs.append(json.load(f))
    starts = {}
    for e in (e for log in logs for e in log if e["kind"] in ("fwd", "bwd")):
        starts[e["iteration"]] = min(starts.get(e["iteration"], e["start"]), e["start"])
    worst, inside = 0.0, 0.0
    for log in logs:
        own_end = {}
        for e in (e for e in log if e["kind"] in ("fwd", "bwd")):
            own_end[e["iteration"]] = max(own_end.get(e["iteration"], e["end"]), e["end"])
        windows = merged([(starts[it], own_end[it]) for it in own_end])  # async batches overlap
        evs = [e for e in log if e["kind"].startswith("mig_")]
        sent = {id(e) for e in evs if e["kind"] == "mig_msg" and any(x["kind"] == "mig_push" for x in evs)}
        mine = [e for e in evs if id(e) not in sent]
        worst = max(worst, sum(e["end"] - e["start"] for e in mine) * 1e3)
        inside = max(inside, sum(max(0.0, min(e["end"], b) - max(e["start"], a))
                                 for e in mine for a, b in windows) * 1e3)
    return worst, inside


def merged(spans):
    """The union of (start, end) spans as disjoint spans."""
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def stall(rep, at):
    ms = rep["iteration_ms"]
    period = rep.get("period_ms") or ms  # (reports before period_ms: the iteration)
    (m,) = rep["migrations"] or [{"message_iter": at, "done_iter": at + 1}]
    k, done = m["message_iter"], m["done_iter"]
    before = ms[1:k]  # batch 0 pays the warm-up
    during = ms[k:done + 1]
    med = statistics.median(ms[1:])
    return {"before_ms": statistics.median(before), "during_ms": statistics.median(during),
            "ratio": statistics.median(during) / statistics.median(before), "max_over_median": max(ms[1:]) / med,
            "period_ratio": statistics.median(period[k:done + 1]) / statistics.median(period[1:k]),
            "window": [k, done], "iteration_ms": ms, "overruns": sum(rep.get("overruns", [])), "period_ms": period, "steps_ms": rep["steps_ms"],
            "inside_ms": rep["inside_ms"]}


def summary(rows):
    """One line per (stages, transport, schedule, migrate) over the repeats."""
    keys = sorted({(r["stages"], r["transport"], r["schedule"], r["migrate"]) for r in rows})
    out = []
    for key in keys:
        runs = [r for r in rows if (r["stages"], r["transport"], r["schedule"], r["migrate"]) == key]
        ratios, periods = [r["ratio"] for r in runs], [r["period_ratio"] for r in runs]
        out.append({"stages": key[0], "transport": key[1], "schedule": key[2], "migrate": key[3], "runs": len(runs),
                    "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                    "period_ratio_median": statistics.median(periods),
                    "worst_max_over_median": max(r["max_over_median"] for r in runs),
                    "steps_ms_median": statistics.median(r["steps_ms"] for r in runs),
                    "inside_ms_median": statistics.median(r["inside_ms"] for r in runs),
                    "inside_ms_max": max(r["inside_ms"] for r in runs)})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=14)
    p.add_argument("--at", type=int, default=7, help="the migration's message batch")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--schedules", default="flush,async")
    p.add_argument("--setups", default="3:shm,3:tcp,4:shm,4:tcp",
                   help="STAGES:TRANSPORT,... (TRANSPORT shm, tcp, or netns: a namespace per stage, needs root)")
    p.add_argument("--rate", default="1gbit", help="the netns links' tc htb rate")
    p.add_argument("--emulate-ms", metavar="FWD:BWD[@SAMPLES]", help="every layer on an emulated device (module docstring)")
    p.add_argument("--json", help="write every run here")
    p.add_argument("--plot", help="a PNG of the iteration times")
    args = p.parse_args(argv)
    setups = [(int(a), b) for a, b in (t.split(":") for t in args.setups.split(","))]
    if any(t == "netns" for _, t in setups) and os.geteuid() != 0:
        print("migration_stall: netns setups need root (ip netns, tc); run it with sudo.")
        return 77
    rows = []
    for rep_i in range(args.repeats):
        for stages, transport in setups:
            for schedule in args.schedules.split(","):
                for migrate in (True, False):  # interleaved: the host's load hits both alike
                    r = stall(one(stages, transport, schedule, migrate, args), args.at)
                    r.update(repeat=rep_i, stages=stages, transport=transport, schedule=schedule, migrate=migrate)
                    rows.append(r)
                    print(f"{rep_i} {stages} {transport:3} {schedule:5} {'migrate' if migrate else 'none   '} "
                          f"before {r['before_ms']:7.2f} during {r['during_ms']:7.2f} ratio {r['ratio']:.3f} "
                          f"max/median {r['max_over_median']:.2f} period ratio {r['period_ratio']:.3f} "
                          f"steps {r['steps_ms']:.2f} ms, inside batches {r['inside_ms']:.2f} ms, overruns {r['overruns']}",
                          flush=True)
    table = summary(rows)
    print("stages transport schedule migrate runs | during/before median (min..max) | period ratio | worst max/median "
          "| steps in batches ms median (max)")
    for t in table:
        print(f"{t['stages']} {t['transport']:3} {t['schedule']:5} {'migrate' if t['migrate'] else 'none   '} {t['runs']} | "
              f"{t['ratio_median']:.3f} ({t['ratio_min']:.3f}..{t['ratio_max']:.3f}) | {t['period_ratio_median']:.3f} | "
              f"{t['worst_max_over_median']:.2f} | {t['inside_ms_median']:.2f} ({t['inside_ms_max']:.2f})")
    return finish(args, {"summary": table, "runs": rows}, lambda path: plot(rows, path))


def finish(args, data, draw):
    """The host's load average (printed and kept: this VM is shared), --json, --plot."""
    print(f"load average {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(data, loadavg=os.getloadavg(), args=vars(args)), f, indent=1)
    if args.plot:
        draw(args.plot)
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
