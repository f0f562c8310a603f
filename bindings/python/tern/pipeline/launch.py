"""Runs a pipeline: S stage processes (python3 -m tern.pipeline.worker) on
this host, or the single-process reference in-process when S = 1, then
merges what the stages left into DIR/final.pt and the report."""
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

import tern

from .links import CONTROL_LEVEL, PIPELINE_LEVEL
from .migration import MIGRATION_LEVEL, STREAM_LEVEL
from .runtime import StageRuntime

# Which tern priority level carries what (the report's "levels"; flow_stats is per class).
LEVELS = {"migration": MIGRATION_LEVEL, "pipeline": PIPELINE_LEVEL, "control": CONTROL_LEVEL, "stream": STREAM_LEVEL}


def run(cfg, save_dir, deadline_s=600):
    """Trains; returns the report dict (also leaves DIR/final.pt)."""
    os.makedirs(save_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tern-pipeline-") as work:
        if cfg.stages == 1:
            runtime = StageRuntime(cfg, None, 0)
            runtime.run()
            runtime.save(work)
        else:
            _spawn(cfg, work, deadline_s)
        return _merge(cfg, work, save_dir)


def _spawn(cfg, work, deadline_s):
    config_path = os.path.join(work, "config.json")
    with open(config_path, "w") as f:
        f.write(cfg.to_json())
    # The stages import the same tern package as this process, wherever it lies.
    here = os.path.dirname(os.path.dirname(os.path.abspath(tern.__file__)))
    path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, TERN_PIPELINE_UID=tern.unique_id().hex(), OMP_NUM_THREADS="1", PYTHONPATH=path)
    if cfg.transport:
        env["TERN_TRANSPORT"] = cfg.transport
    procs = [subprocess.Popen(_netns(cfg, r) + [sys.executable, "-m", "tern.pipeline.worker", config_path, str(r), work],
                              env=dict(env, TERN_RANK=str(r), TERN_NRANKS=str(cfg.stages), TERN_ROOT=cfg.root)
                              if cfg.netns else env)
             for r in range(cfg.stages)]
    deadline = time.monotonic() + deadline_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if any(p.poll() not in (None, 0) for p in procs):
            # One stage failed: the others learn it from tern (a dead peer is
            # an error, a stalled one a timeout) and exit on their own; they
            # are killed only if they outlive tern's timeout.
            deadline = min(deadline, time.monotonic() + cfg.timeout + 10)
        time.sleep(0.05)
    killed = [r for r, p in enumerate(procs) if p.poll() is None]
    for r in killed:
        procs[r].kill()
        procs[r].wait()
    failed = [f"stage {r} exited with status {p.returncode}" for r, p in enumerate(procs)
              if p.returncode != 0 and r not in killed]
    if killed:
        failed.append(f"stage(s) {killed} did not finish in time and were killed")
    if failed:
        raise RuntimeError("; ".join(failed))


def _netns(cfg, rank):
    """The command prefix that runs stage `rank` in its namespace, if any."""
    return ["ip", "netns", "exec", cfg.netns[rank]] if cfg.netns else []


def _merge(cfg, work, save_dir):
    summaries, state = [], {}
    for s in range(cfg.stages):
        with open(os.path.join(work, f"stage{s}.json")) as f:
            summaries.append(json.load(f))
        state.update(torch.load(os.path.join(work, f"stage{s}.pt")))
        os.replace(os.path.join(work, f"events-stage{s}.json"), os.path.join(save_dir, f"events-stage{s}.json"))
    # By global layer index; within a layer the module's own order (a stable sort).
    ordered = {k: state[k] for k in sorted(state, key=lambda k: int(k.split(".")[1]))}
    torch.save(ordered, os.path.join(save_dir, "final.pt"))
    return _report(cfg, summaries)


def _report(cfg, summaries):
    head, tail = summaries[0], summaries[-1]
    iters = len(head["ends"])
    if cfg.schedule == "flush":  # the pipeline's makespan: first start to last end over the stages
        iteration_ms = [(max(s["ends"][i] for s in summaries) - min(s["starts"][i] for s in summaries)) * 1e3
                        for i in range(iters)]
    else:  # async: the pipeline never drains; the time between batch completions at stage 0
        iteration_ms = [(head["ends"][i] - head["starts"][i]) * 1e3 for i in range(iters)]
    firsts = [min(s["starts"][i] for s in summaries) for i in range(iters)]
    return {"iteration_ms": iteration_ms,
            # wall time from one batch's first start to the next one's: the batch, its
            # boundary (measure, plan, a completing migration) and any wait between
            "period_ms": [(b - a) * 1e3 for a, b in zip(firsts, firsts[1:])],
            "partition_by_iter": head["partition_by_iter"],
            "plan_by_iter": head["plan_by_iter"],
            "predicted_ms": head["predicted_ms"],
            # per stage: the process's CPU time (every thread) in each flush batch
            "cpu_ms": [[c * 1e3 for c in s.get("cpu", [])] for s in summaries],
            "migrations": sorted((m for s in summaries for m in s["migrations"]),
                                 key=lambda m: (m["message_iter"], m["from"])),
            "weight_versions_ok": all(s["weight_versions_ok"] for s in summaries),
            # ops whose real math outlasted their emulated device time, per stage
            "overruns": [s["overruns"] for s in summaries],
            "version_checks": sum(s["version_checks"] for s in summaries),
            "loss": tail["losses"],
            "decisions": head["decisions"],
            "rebalance": head["rebalance"],
            "flow_stats": [s["flow_stats"] for s in summaries],
            "levels": LEVELS,
            "schedule": cfg.schedule, "stages": cfg.stages, "layers": cfg.layers, "width": cfg.width,
            "batch": cfg.batch}
