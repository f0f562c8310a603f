#!/usr/bin/env python3
"""The cost model's predictions against measured allreduce times on emulated hosts (issue 45).

  perf/model_check.py [--configs 2x1,2x2,3x1,4x1] [--rate 1gbit] [-b 4K] [-e 64M] [-f 4] [-n 5] [-w 2]
                      [--rounds 2] [--algos ring,rd,twolevel,auto] [--model FILE] [--build DIR]
                      [--json FILE] [--png FILE] [--measurements FILE]
  perf/model_check.py --cells FILE [--model FILE] [--png FILE]    (no runs: a stored --json's cells again)
  perf/model_check.py --check    (the test's short run: 2x1, 256 KiB-1 MiB, one round; exits 77 where it cannot run)

Each configuration HxL is H network namespaces ("hosts") on one bridge, every
host's link shaped with tc htb to --rate at both ends (perf/compare's Netns), and
L ranks in each (rank r on host r // L: tern groups ranks by namespace, shm
inside a host, tcp between). Every forced algorithm (TERN_ALGO, with
TERN_SMALL_THRESHOLD=0 so that the force holds at every size) and the default
(auto, the threshold as shipped) run build/perf/all_reduce_perf's checked table,
interleaved round by round; a cell is the median over the rounds. Beside each
measured time: what `tern-plan collectives` predicts for the same layout, link
rate, size and algorithm (the model of --model, else the built-in defaults),
and the error (predicted / measured - 1).

The summary counts the cells within 15% from 64 KiB and within 30% below (the
issue's targets), and for auto its time against the best forced algorithm's in
each row (within 10% is the target). twolevel is left out of a configuration
with one rank per host (it is the flat ring there). The namespaces are
removed afterwards, whatever happens. Needs root.

--measurements writes the forced algorithms' times (every round) in the form
`tern-plan fit` reads, so a model fitted to one run can be checked against the
cells of another with --cells (what is predicted is recomputed; nothing runs).
"""
import argparse
import importlib.machinery
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# perf/compare's helpers: shell calls, namespaces, rank launching, table parsing, the phase.
compare = importlib.machinery.SourceFileLoader("compare", os.path.join(HERE, "compare")).load_module()

NEAR_BYTES = 64 << 10   # from here the target is 15%, below it 30%
NEAR, FAR, AUTO_SLACK = 0.15, 0.30, 0.10


def parse_config(text):
    h, l = text.lower().split("x")
    return int(h), int(l)


def algos_for(algos, l):
    return [x for x in algos if not (x == "twolevel" and l == 1)]


def measure_run(a, net, h, l, algo):
    """Rank 0's rows {bytes: (us, busbw)} of one all_reduce_perf run."""
    n = h * l
    root = "%s:%d" % (net.addrs[0], compare.free_port())
    secret = secrets.token_hex(16)
    argv = [os.path.join(a.build, "perf", "all_reduce_perf"),
            "-b", a.b, "-e", a.e, "-f", str(a.f), "-n", str(a.n), "-w", str(a.w), "-c", "1"]

    def env(r):
        e = dict(TERN_RANK=str(r), TERN_NRANKS=str(n), TERN_ROOT=root, TERN_SECRET=secret)
        if algo != "auto":
            e.update(TERN_ALGO=algo, TERN_SMALL_THRESHOLD="0")
        if a.model:
            e["TERN_MODEL_FILE"] = os.path.abspath(a.model)
        return e

    class PerHost:  # compare.run_ranks puts rank r in ns(r)
        def ns(self, r):
            return net.ns(r // l)
    return compare.parse_rows(compare.run_ranks(n, argv, env, PerHost()))


def predictions(a, h, l, sizes):
    """{algorithm: {bytes: us}} and the model's choice {bytes: algorithm}."""
    cmd = [os.path.join(a.build, "tools", "tern-plan"), "collectives", "--hosts", str(h),
           "--ranks-per-host", str(l), "--sizes", ",".join(str(s) for s in sizes), "--json"]
    # A model file's network figures stand (--net would set them from the rate).
    cmd += ["--model", a.model] if a.model else ["--net", a.rate]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    pred = {}
    for p in out["predictions"]:
        pred.setdefault(p["algorithm"], {})[p["bytes"]] = p["time_us"]
    choice = {int(b): c["algorithm"] for b, c in out["choice"].items()}
    return pred, choice, out.get("model", "")


def run_config(a, h, l, algos):
    """{algo: {bytes: [us per round]}} and the phases (core_pingpong ns) before and after."""
    net = compare.Netns(h, a.rate, prefix="tern45m-%d" % os.getpid())
    times = {x: {} for x in algos}
    phases = [compare.phase_ns(a)]
    try:
        for rnd in range(a.rounds):
            for algo in algos[rnd % len(algos):] + algos[:rnd % len(algos)]:
                print("# %dx%d round %d, %s, from %s" % (h, l, rnd, algo, time.strftime("%H:%M:%S")),
                      file=sys.stderr)
                for size, (us, _) in measure_run(a, net, h, l, algo).items():
                    times[algo].setdefault(size, []).append(us)
    finally:
        net.close()
    phases.append(compare.phase_ns(a))
    return times, phases


def error(pred, meas):
    return pred / meas - 1.0


def report(h, l, algos, times, pred, choice, phases):
    """Prints the configuration's table; returns its cells for the summary."""
    forced = [x for x in algos if x != "auto"]
    print("\n# %d hosts x %d ranks, allreduce float32 sum; phase %s ns before, %s after (core_pingpong)"
          % (h, l, *["%.0f" % p if p else "?" for p in phases]))
    head = "%10s" % "size"
    for x in forced:
        head += " %11s %11s %7s" % (x + " us", "predicted", "err")
    if "auto" in algos:
        head += " %11s %9s %9s" % ("auto us", "vs best", "model")
    print(head)
    cells = []
    for size in sorted(times[algos[0]]):
        med = {x: statistics.median(times[x][size]) for x in algos if size in times[x]}
        line = "%10s" % compare.fmt_size(size)
        for x in forced:
            p = pred.get(x, {}).get(size)
            e = error(p, med[x]) if p else None
            if e is not None:
                cells.append(dict(config="%dx%d" % (h, l), algo=x, bytes=size, measured_us=med[x],
                                  predicted_us=p, err=e, rounds_us=times[x][size]))
            line += " %11.0f %11.0f %+6.0f%%" % (med[x], p or 0, 100 * e if e is not None else 0)
        if "auto" in med:
            best = min(med[x] for x in forced)
            cells.append(dict(config="%dx%d" % (h, l), algo="auto", bytes=size, measured_us=med["auto"],
                              best_us=best, model_choice=choice.get(size, "?"), rounds_us=times["auto"][size]))
            line += " %11.0f %8.2fx %9s" % (med["auto"], med["auto"] / best, choice.get(size, "?"))
        print(line)
    return cells


def replay(a, stored):
    """The stored cells' configurations reported again with --model's predictions."""
    cells = []
    for cfg in dict.fromkeys(c["config"] for c in stored):
        h, l = parse_config(cfg)
        mine = [c for c in stored if c["config"] == cfg]
        algos = list(dict.fromkeys(c["algo"] for c in mine if c["algo"] != "auto"))
        algos += ["auto"] if any(c["algo"] == "auto" for c in mine) else []
        times = {x: {c["bytes"]: c.get("rounds_us", [c["measured_us"]]) for c in mine if c["algo"] == x} for x in algos}
        pred, choice, model = predictions(a, h, l, sorted(times[algos[0]]))
        cells += report(h, l, algos, times, pred, choice, [None, None])
    return cells, model


def write_measurements(cells, rate, path):
    """The forced algorithms' round times as `tern-plan fit` reads them."""
    ms = []
    for c in cells:
        if c["algo"] == "auto":
            continue
        h, l = parse_config(c["config"])
        for us in c.get("rounds_us", [c["measured_us"]]):
            ms.append(dict(algorithm=c["algo"], link="tcp", hosts=h, ranks_per_host=[l] * h, bytes=c["bytes"],
                           dtype_bytes=4, time_us=us))
    with open(path, "w") as f:
        json.dump(dict(measurements=ms, source="perf/model_check.py, links shaped to " + rate), f, indent=1)
    print("# %d measurements for tern-plan fit: %s" % (len(ms), path))


def check(a, cells):
    """The short run's assertions: every forced algorithm has a measured and a
    predicted time at every size, and tern-plan fit takes the measurements."""
    want = {(x, b) for x in ("ring", "rd") for b in (256 << 10, 1 << 20)}
    got = {(c["algo"], c["bytes"]) for c in cells if c["algo"] != "auto"
           and c["measured_us"] > 0 and c["predicted_us"] > 0}
    if want - got:
        sys.exit("FAIL: cells without a measured and a predicted time: %s" % sorted(want - got))
    fitted = subprocess.run([os.path.join(a.build, "tools", "tern-plan"), "fit", a.measurements],
                            capture_output=True, text=True)
    if fitted.returncode != 0 or "fitted to 4 measurements" not in fitted.stdout:
        sys.exit("FAIL: tern-plan fit refused the measurements: %s" % (fitted.stderr or fitted.stdout))
    print("# check passed: %d cells, the measurements fitted" % len(got))


def summarize(cells):
    fits = [c for c in cells if c["algo"] != "auto"]
    near = [c for c in fits if c["bytes"] >= NEAR_BYTES]
    far = [c for c in fits if c["bytes"] < NEAR_BYTES]
    ok_near = sum(abs(c["err"]) <= NEAR for c in near)
    ok_far = sum(abs(c["err"]) <= FAR for c in far)
    print("\n# predictions within %d%% of measured from 64 KiB: %d of %d cells (%.0f%%; target 90%%)"
          % (100 * NEAR, ok_near, len(near), 100.0 * ok_near / max(1, len(near))))
    print("# within %d%% below 64 KiB: %d of %d cells" % (100 * FAR, ok_far, len(far)))
    autos = [c for c in cells if c["algo"] == "auto"]
    ok_auto = sum(c["measured_us"] <= (1 + AUTO_SLACK) * c["best_us"] for c in autos)
    print("# auto within %d%% of the best forced algorithm: %d of %d rows" % (100 * AUTO_SLACK, ok_auto, len(autos)))
    worst = sorted(fits, key=lambda c: -abs(c["err"]))[:5]
    for c in worst:
        print("#   off most: %s %s %s: predicted %.0f us, measured %.0f (%+.0f%%)" % (
            c["config"], c["algo"], compare.fmt_size(c["bytes"]), c["predicted_us"], c["measured_us"],
            100 * c["err"]))


def plot(cells, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fits = [c for c in cells if c["algo"] != "auto"]
    configs = sorted({c["config"] for c in fits})
    fig, axes = plt.subplots(1, len(configs), figsize=(4.2 * len(configs), 4), squeeze=False)
    for ax, cfg in zip(axes[0], configs):
        for algo, mark in (("ring", "o"), ("rd", "s"), ("twolevel", "^")):
            cs = sorted((c for c in fits if c["config"] == cfg and c["algo"] == algo), key=lambda c: c["bytes"])
            if not cs:
                continue
            xs = [c["bytes"] for c in cs]
            line, = ax.plot(xs, [c["measured_us"] for c in cs], mark + "-", label=algo + " measured")
            ax.plot(xs, [c["predicted_us"] for c in cs], "--", color=line.get_color(), label=algo + " predicted")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(cfg.replace("x", " hosts x ") + " ranks")
        ax.set_xlabel("bytes")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("allreduce time (us)")
    handles = {}
    for ax in axes[0]:
        for hd, lb in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lb, hd)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    print("# plot: %s" % path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="2x1,2x2,3x1,4x1")
    p.add_argument("--rate", default="1gbit")
    compare.add_size_args(p, b="4K", e="64M", f=4, n=5, w=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--algos", default="ring,rd,twolevel,auto")
    p.add_argument("--model", help="a model file (tern-plan calibrate's); the defaults without one")
    p.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    p.add_argument("--json", help="write every cell here")
    p.add_argument("--png", help="plot measured against predicted here")
    p.add_argument("--measurements", help="write the forced algorithms' times for tern-plan fit here")
    p.add_argument("--cells", help="report a stored --json's cells (its --rate) instead of running")
    p.add_argument("--check", action="store_true", help="the short run of the test suite, with its checks")
    a = p.parse_args()
    if a.check:
        if os.geteuid() != 0 or not shutil.which("tc"):
            print("skipped: needs root and tc"); sys.exit(77)
        a.configs, a.b, a.e, a.n, a.w, a.rounds, a.algos = "2x1", "256K", "1M", "2", "1", 1, "ring,rd"
        a.measurements = a.measurements or os.path.join(tempfile.mkdtemp(), "measurements.json")
    if a.cells:
        with open(a.cells) as f:
            cells, model = replay(a, json.load(f))
    else:
        if os.geteuid() != 0:
            sys.exit("needs root (network namespaces, tc)")
        compare.cleanup_stale("tern45m-")
        cells = []
        for cfg in a.configs.split(","):
            h, l = parse_config(cfg)
            algos = algos_for(a.algos.split(","), l)
            times, phases = run_config(a, h, l, algos)
            pred, choice, model = predictions(a, h, l, sorted(times[algos[0]]))
            cells += report(h, l, algos, times, pred, choice, phases)
    print("\n# model: %s; links shaped to %s" % (model, a.rate))
    if a.measurements:
        write_measurements(cells, a.rate, a.measurements)
    if a.check:
        check(a, cells)
    summarize(cells)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(cells, f, indent=1)
    if a.png:
        plot(cells, a.png)


if __name__ == "__main__":
    main()
