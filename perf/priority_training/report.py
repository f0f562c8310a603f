#!/usr/bin/python3
"""perf/priority_training/report.py RESULT.json... [--plots perf/plots]

The table (markdown) of perf/priority_training/run's results: per rank
count and variant, the median over rounds of the mean iteration time, the
spread (min-max over rounds), and the speed-up against plain DDP (the
median over rounds of DDP's time / the variant's in the same round, so a
round's load drift hits both), and where the run recorded them, the share
of the host's cores busy and the CPU time of all ranks per iteration
(medians over rounds).  Plots: iteration time per policy
(priority_iter_<N>h.png), and one PriorityScheduler(tac) iteration, each
allreduce partition and update a span on its level's row
(priority_timeline_<N>h.png).  Runs on an emulated device (run --emulate)
add the ideal (perfect overlap: the larger of the device's compute and the
gradients' transfer time per iteration), each variant's time as a multiple
of it, and the overruns per iteration (ops whose real math outlasted their
device time: the emulation's own error).
"""
import argparse
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
PLOTS = os.path.join(os.path.dirname(HERE), "plots")


def per_round(doc):
    """{variant: {round: ms per iteration}}."""
    out = {}
    for run in doc["runs"]:
        out.setdefault(run["variant"], {})[run["round"]] = run["seconds"] * 1e3 / len(run["iter_ms"])
    return out


def pooled_median(doc, variant):
    """The median single iteration over all rounds: robust to the host's bursts."""
    return statistics.median(ms for run in doc["runs"] if run["variant"] == variant for ms in run["iter_ms"])


def usage(doc, variant):
    """' | host busy | CPU ms per iteration' cells (medians over rounds), '' if not recorded."""
    runs = [r for r in doc["runs"] if r["variant"] == variant and "host_busy" in r]
    if not runs:
        return " | - | -"
    return " | %.0f%% | %.0f" % (statistics.median(r["host_busy"] for r in runs) * 100,
                                 statistics.median(r["cpu_ms"] for r in runs))


def versus_ideal(doc, variant, ms):
    """' | x the ideal | overruns per iteration' cells, '' for runs on the host's own compute."""
    best = doc.get("ideal")
    if not best:
        return " | - | -"
    runs = [r for r in doc["runs"] if r["variant"] == variant]
    return " | %.2fx | %.1f" % (ms / best["ideal_ms"],
                                 statistics.median(r.get("overruns", 0) / len(r["iter_ms"]) for r in runs))


def ideal_line(doc):
    best = doc.get("ideal")
    if not best:
        return ""
    return ("%d hosts: ideal %.1f ms per iteration = max(device compute %.1f ms, gradient transfer %.1f ms of "
            "%.1f MB at %s)" % (doc["cfg"]["nranks"], best["ideal_ms"], best["compute_ms"], best["transfer_ms"],
                                best["param_bytes"] / 1e6, doc["cfg"]["link"]))


def table(docs):
    rows = ["| hosts | batch/rank | variant | ms/iteration (median of rounds) | min-max over rounds "
            "| median single iteration | speed-up vs DDP (median of rounds) | host cores busy "
            "| CPU ms (all ranks) per iteration | x the ideal | overruns per iteration |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for doc in docs:
        n, times = doc["cfg"]["nranks"], per_round(doc)
        hosts = "%d (%s)" % (n, doc["cfg"]["condition"]) if doc["cfg"].get("condition") else str(n)
        base = times.get("ddp", {})
        for v, by_round in times.items():
            ms = list(by_round.values())
            ratios = [base[r] / t for r, t in by_round.items() if r in base]
            gain = "%.2fx" % statistics.median(ratios) if ratios and v != "ddp" else "-"
            rows.append("| %s | %d | %s | %.1f | %.1f-%.1f | %.1f | %s%s%s |" % (
                hosts, doc["cfg"]["batch"], v, statistics.median(ms), min(ms), max(ms), pooled_median(doc, v), gain,
                usage(doc, v), versus_ideal(doc, v, statistics.median(ms))))
    return "\n".join(rows + [""] + [ideal_line(d) for d in docs if d.get("ideal")])


def plot_iterations(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    times = per_round(doc)
    names = list(times)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.boxplot([list(times[v].values()) for v in names], labels=names)
    for i, v in enumerate(names):
        ax.scatter([i + 1] * len(times[v]), list(times[v].values()), s=10, color="k", zorder=3)
    if doc.get("ideal"):  # emulated compute: perfect overlap, the bound every variant is read against
        ax.axhline(doc["ideal"]["ideal_ms"], color="tab:green", linestyle="--", linewidth=1,
                   label="ideal %.0f ms (perfect overlap)" % doc["ideal"]["ideal_ms"])
        ax.legend(fontsize=8, loc="lower left")
    c = doc["cfg"]
    ax.set_ylabel("ms per iteration (mean of a round)")
    ax.set_ylim(bottom=0)
    ax.set_title("%d hosts, %s links%s: plain DDP vs PriorityScheduler (%d rounds)" % (
        c["nranks"], c["link"], " (%s)" % c["condition"] if c.get("condition") else "", c["rounds"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_timeline(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    spans = doc["spans"]
    if not spans:
        return
    marks = sorted(s["start"] for s in spans if s["kind"] == "iteration")
    work = [s for s in spans if s["kind"] != "iteration"]
    t0 = marks[0] if marks else min(s["start"] for s in work)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    colors = {"allreduce": "tab:blue", "update": "tab:orange"}
    for s in work:
        y = s["level"] + (0.2 if s["kind"] == "update" else -0.2)
        ax.barh(y, (s["end"] - s["start"]) * 1e3, left=(s["start"] - t0) * 1e3, height=0.35,
                color=colors[s["kind"]], edgecolor="k", linewidth=0.3)
    for m in marks:
        ax.axvline((m - t0) * 1e3, color="gray", linestyle="--", linewidth=0.8)
    ax.set_yticks(range(8))
    ax.set_ylim(7.7, -0.7)
    ax.set_ylabel("level (0 = most urgent)")
    ax.set_xlabel("ms from the iteration's start (dashed: forward starts)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()], labels=list(colors),
              fontsize=8, loc="upper left")
    ax.set_title("One PriorityScheduler(tac) iteration, rank 0 of %d: allreduce partitions and updates"
                 % doc["cfg"]["nranks"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--plots", default=PLOTS)
    a = ap.parse_args()
    docs = [json.load(open(p)) for p in a.results]
    print(table(docs))
    for doc in docs:
        name = "%dh%s" % (doc["cfg"]["nranks"], "_" + doc["cfg"]["condition"].replace(", ", "_")
                          if doc["cfg"].get("condition") else "")
        plot_iterations(doc, os.path.join(a.plots, "priority_iter_%s.png" % name))
        plot_timeline(doc, os.path.join(a.plots, "priority_timeline_%s.png" % name))


if __name__ == "__main__":
    main()
