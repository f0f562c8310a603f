"""PNG gantt chart of a planned kFkB schedule (matplotlib).

    python3 gantt.py OUT.png < trace.json     # what `tern-plan schedule --gantt OUT.png` runs
    tern.gantt.draw(trace, "out.png")         # trace: tern.planner.trace(model)

The trace is libtern_planner's: {"title", "stages", "iteration_ms", "events":
[{"kind", "stage", "micro", "start_ms", "end_ms"}]}.  Stages go down, time
across; each stage's row is grey where it idles (the bubble), and the lane
under it shows the link to the next stage: activations in its upper half,
gradients in its lower half.  Only the standard library and matplotlib are
imported, so tern-plan can run this file on its own.
"""
import json
import sys

COLOURS = {"forward": "#4c78a8", "backward": "#f58518", "activation": "#54a24b", "gradient": "#b279a2"}
LABELS = {"forward": "forward", "backward": "backward", "activation": "activation transfer",
          "gradient": "gradient transfer"}
STAGE_H, LINK_H = 1.0, 0.5  # row heights (data units): a stage, the link lane below it


def _row_top(stage):
    return stage * (STAGE_H + LINK_H)


def _bar(event):
    """(y, height) of an event's bar; y grows downwards (the axis is inverted)."""
    kind, stage = event["kind"], event["stage"]
    if kind in ("forward", "backward"):
        return _row_top(stage) + 0.06, STAGE_H - 0.12
    if kind == "activation":  # sent by `stage` down to stage + 1
        return _row_top(stage) + STAGE_H + 0.02, LINK_H / 2 - 0.04
    return _row_top(stage - 1) + STAGE_H + LINK_H / 2 + 0.02, LINK_H / 2 - 0.04  # gradient, up to stage - 1


def draw(trace, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    stages, span = trace["stages"], trace["iteration_ms"]
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.75 * stages), dpi=110)
    for s in range(stages):
        ax.broken_barh([(0, span)], (_row_top(s), STAGE_H), facecolors="#e6e6e6")
    by_kind = {}
    for e in trace["events"]:
        by_kind.setdefault(e["kind"], []).append(e)
    for kind, events in by_kind.items():
        for e in events:
            y, h = _bar(e)
            wide = (e["end_ms"] - e["start_ms"]) / span > 0.004  # a white outline would hide a sliver
            ax.broken_barh([(e["start_ms"], e["end_ms"] - e["start_ms"])], (y, h), facecolors=COLOURS[kind],
                           edgecolors="white" if wide else "none", linewidth=0.4)
    _label_micro_batches(ax, trace["events"], span)
    ax.set_xlim(0, span)
    ax.set_ylim(_row_top(stages - 1) + STAGE_H + 0.05, -0.05)
    ax.set_yticks([_row_top(s) + STAGE_H / 2 for s in range(stages)])
    ax.set_yticklabels([f"stage {s}" for s in range(stages)])
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", color="#cccccc", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(trace["title"], fontsize=12, fontweight="bold", loc="left", pad=26)
    handles = [Patch(color=COLOURS[k], label=LABELS[k]) for k in COLOURS]
    handles.append(Patch(facecolor="#e6e6e6", edgecolor="#bbbbbb", label="idle (bubble)"))
    ax.legend(handles=handles, ncol=5, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _label_micro_batches(ax, events, span):
    """The micro-batch number inside compute bars wide enough to hold it."""
    width_px = ax.get_window_extent().width
    for e in events:
        if e["kind"] not in ("forward", "backward"):
            continue
        if (e["end_ms"] - e["start_ms"]) / span * width_px < 14:
            continue
        y, h = _bar(e)
        ax.text((e["start_ms"] + e["end_ms"]) / 2, y + h / 2, str(e["micro"]), ha="center", va="center",
                fontsize=7, color="white")


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: gantt.py OUT.png < trace.json")
    try:
        import matplotlib  # noqa: F401  (say so plainly when it is missing)
    except ImportError:
        sys.exit(f"{sys.executable} has no matplotlib (Debian: apt-get install python3-matplotlib); "
                 "an .svg gantt needs nothing.")
    draw(json.load(sys.stdin), argv[1])


if __name__ == "__main__":
    main(sys.argv)
