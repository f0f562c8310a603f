"""Runs a pipeline: S stage processes (tern.pipeline.worker, forked from a fork server) on
this host, or the single-process reference in-process when S = 1, then
merges what the stages left into DIR/final.pt and the report."""
import json
import multiprocessing
import os
import select
import subprocess
import sys
import tempfile
import threading
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
    if cfg.netns:
        procs = [subprocess.Popen(_netns(cfg, r) + [sys.executable, "-m", "tern.pipeline.worker", config_path, str(r),
                                                    work],
                                  env=dict(env, TERN_RANK=str(r), TERN_NRANKS=str(cfg.stages), TERN_ROOT=cfg.root))
                 for r in range(cfg.stages)]
    else:
        procs = [_Forked(_forkserver().Process(target=_stage_main, args=(env, config_path, r, work, os.getpid())))
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


def _forkserver():
    """Stages on this host are forked from multiprocessing's fork server, which
    imports torch and the stage's modules once per launcher: a stage started
    as a new interpreter spends ~2 s of a core importing them (2026-12-04:
    1.5 s for torch alone), which is most of a short run's CPU.  The server
    has run nothing (no thread, no OpenMP pool), so its children start
    clean; a stage in a network namespace still starts through `ip netns
    exec`, a new interpreter."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "tern", "tern.pipeline.worker"])
    return ctx


def _stage_main(env, config_path, rank, work, launcher):
    """A forked stage: the environment a new interpreter would have had
    (OMP_NUM_THREADS=1 applies to torch's pool, made on first use), then
    the worker's main."""
    _exit_with(launcher)
    os.environ.clear()
    os.environ.update(env)
    torch.set_num_threads(1)
    from . import worker
    sys.exit(worker.main([config_path, str(rank), work]))


def _exit_with(pid):
    """This stage ends when the launcher `pid` does.  The worker's
    PR_SET_PDEATHSIG names the fork server, this stage's parent, and the
    server outlives a killed launcher while a stage holds its pipe; so a
    thread waits on the launcher's pidfd (no polling) and ends the stage."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)

    def wait():
        select.select([fd], [], [])
        os._exit(1)
    threading.Thread(target=wait, name="tern-launcher-watch", daemon=True).start()


class _Forked:
    """A started multiprocessing.Process with the Popen calls _spawn makes."""

    def __init__(self, process):
        self.process = process
        process.start()

    def poll(self):
        return self.process.exitcode

    @property
    def returncode(self):
        return self.process.exitcode

    def kill(self):
        self.process.kill()

    def wait(self):
        self.process.join()


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
