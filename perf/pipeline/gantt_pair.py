"""A measured Gantt (from the stages' event logs) beside the planner's
(tern.planner.trace of the model the runtime measured), for one batch run
with (m, K): the picture perf/pipeline/pipeline_perf.py --plot draws."""
import json
import os

import tern.planner as planner
from tern import gantt
from tern.pipeline.replan import model_json
from tern.pipeline.config import Config

KINDS = {"fwd": "forward", "bwd": "backward", "send_act": "activation", "send_grad": "gradient"}


def measured_trace(directory, report, iteration):
    """The batch's events as a planner-style trace, times from its first start."""
    events = []
    for s in range(report["stages"]):
        with open(os.path.join(directory, f"events-stage{s}.json")) as f:
            events += [e for e in json.load(f) if e["iteration"] == iteration and e["kind"] in KINDS]
    t0 = min(e["start"] for e in events)
    out = [{"kind": KINDS[e["kind"]], "stage": e["stage"], "micro": e["micro"],
            "start_ms": (e["start"] - t0) * 1e3, "end_ms": (e["end"] - t0) * 1e3} for e in events]
    return {"title": f"measured, batch {iteration}", "stages": report["stages"],
            "iteration_ms": max(e["end_ms"] for e in out), "events": out}


def draw_pair(directory, report, mk, path, cores=None):
    """cores: the shared cores the plan assumed (default: what the decision
    recorded; 0 for a device per stage)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt
    runs = [i for i, p in enumerate(report["plan_by_iter"]) if tuple(p) == tuple(mk) and i > 0]
    iteration = runs[-1]
    decision = report["decisions"][-1]
    cfg = Config(stages=report["stages"], layers=report["layers"], width=report.get("width", 512),
                 batch=report.get("batch", 32))
    partition = report["partition_by_iter"][iteration]
    cores = decision.get("cores", 0) if cores is None else cores
    planned = planner.trace(model_json(cfg, partition, decision["rows"], mk[0], cores), microbatches=mk[0], k=mk[1])
    planned["title"] = f"planned (m={mk[0]}, K={mk[1]})"
    parts = [path + ".measured.png", path + ".planned.png"]
    gantt.draw(measured_trace(directory, report, iteration), parts[0])
    gantt.draw(planned, parts[1])
    fig, axes = plt.subplots(1, 2, figsize=(18, 5))
    for ax, part in zip(axes, parts):
        ax.imshow(mpimg.imread(part))
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    for part in parts:
        os.remove(part)
