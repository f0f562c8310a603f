"""tern.pipeline (docs/DESIGN.md, "kFkB pipeline planner"): real stage
processes over tern send/recv, torch on CPU, sklearn's digits.

- the stages run the planner's own kFkB order;
- a flushing run equals single-process training of the same batches
  bitwise (the gradient sum order is fixed: ascending micro-batches), for
  K = 1 (1F1B) and K = m (GPipe), 3 stages;
- async PipeDream 1F1B: every backward used its forward's weight version
  (and without stashing the same check fails);
- re-planning when the link's bandwidth drops (emulated by the links'
  injected delay: the netns/tc variant is perf/pipeline/netns_replan.py);
- the demo CLI end to end, and bad flags refused with a sentence.
"""
import argparse
import importlib.machinery
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import tern.planner as planner
from tern.pipeline import Config, kfkb_order, run
from tern.pipeline import demo
from tern.pipeline.replan import MIN_GAIN, Replanner
from tern.pipeline.model import make_layers, state_dict

SMALL = dict(layers=6, width=64, batch=32, iterations=3, lr=0.1, seed=3)


def final(directory):
    return torch.load(os.path.join(directory, "final.pt"))


@pytest.mark.parametrize("m,k,p", [(4, 1, 3), (4, 4, 3), (8, 3, 4), (6, 2, 2), (5, 2, 5)])
def test_stage_order_is_the_planners(m, k, p):
    """Each stage's sequence of forwards and backwards is the one the
    planner simulated (its trace, ordered by start time)."""
    model = {"batch_size": m * 2, "network": {"bandwidth_gbps": 1.0, "latency_us": 10},
             "stages": [{"fwd_ms_per_sample": 1 + s / 3, "bwd_ms_per_sample": 2, "activation_bytes_per_sample": 1000,
                         "static_bytes": 1, "memory_bytes": 1e12} for s in range(p)]}
    events = planner.trace(model, microbatches=m, k=k)["events"]
    for s in range(p):
        planned = [("F" if e["kind"] == "forward" else "B", e["micro"])
                   for e in sorted(events, key=lambda e: e["start_ms"])
                   if e["stage"] == s and e["kind"] in ("forward", "backward")]
        assert kfkb_order(m, k, p, s) == planned


def test_flush_equals_single_process_bitwise(tmp_path):
    ref = run(Config(stages=1, schedule="flush", microbatches=4, k=1, **SMALL), str(tmp_path / "ref"))
    want = final(tmp_path / "ref")
    assert len(want) == 2 * SMALL["layers"]
    for k in (1, 4):  # 1F1B and GPipe
        out = tmp_path / f"k{k}"
        rep = run(Config(stages=3, schedule="flush", microbatches=4, k=k, **SMALL), str(out))
        got = final(out)
        assert list(got) == list(want)  # layers.<global index>.<param>, whatever the partition
        for name in want:
            assert torch.equal(got[name], want[name]), f"K={k}: {name} differs from single-process training"
        assert rep["loss"] == ref["loss"]
        assert rep["weight_versions_ok"] and rep["partition_by_iter"] == [[2, 2, 2]] * 3
        assert rep["plan_by_iter"] == [[4, k]] * 3
    # Training moved the weights (equality is not that of an untouched model).
    init = state_dict(make_layers(range(SMALL["layers"]), SMALL["layers"], SMALL["width"], SMALL["seed"]))
    assert list(init) == list(want)
    assert not any(torch.equal(init[name], want[name]) for name in want)


def test_async_weight_stashing(tmp_path):
    cfg = dict(stages=3, schedule="async", microbatches=4, **SMALL)
    rep = run(Config(**cfg), str(tmp_path / "stash"))
    assert rep["weight_versions_ok"] is True
    assert rep["version_checks"] == 3 * 4 * SMALL["iterations"]  # every backward of every stage checked
    assert len(rep["iteration_ms"]) == SMALL["iterations"]
    # Without stashing the backwards of the first stage (micro-batches in
    # flight across updates) use newer weights, and the check says so.
    rep = run(Config(stash=False, **dict(cfg, stages=2)), str(tmp_path / "nostash"))
    assert rep["weight_versions_ok"] is False


HI, LO = 0.05, 0.005  # Gbit/s, 10x apart


def test_replans_when_the_link_slows(tmp_path):
    """HI Gbit/s, then LO from batch 3 (rates whose probe times, 10 and 105 ms,
    stand above a loaded host's noise: at 0.2 / 0.02 Gbit/s, 2.6 ms probes
    read 3.5x low or as infinitely fast under CI's load): the probe measures
    the new rate and the planner is asked again within two boundaries."""
    cfg = Config(stages=3, schedule="flush", plan=True, microbatches=4, k=1, emulate=[[0, HI], [3, LO]],
                 **dict(SMALL, width=128, batch=32, iterations=8))
    rep = run(cfg, str(tmp_path / "out"))
    first, *later = rep["decisions"]
    assert first["iteration"] == 0 and first["reason"] == "first measurement"
    # Within 3x of the emulated rate (one probe on a loaded host; the two
    # rates are 10x apart, so the ranges cannot be confused).
    assert all(HI / 3 < g < HI * 3 for g in first["bandwidth_gbps"]), first["bandwidth_gbps"]
    # The decisions' link figures are the median of the last 3 probes: the
    # new rate shows at the second boundary after the change, the third if
    # one probe read high (a loaded host: one spurious re-plan may come first).
    drop = [d for d in later if d["iteration"] >= 3 and all(LO / 3 < g < LO * 3 for g in d["bandwidth_gbps"])]
    assert drop and drop[0]["iteration"] in (3, 4, 5), rep["decisions"]
    assert "bandwidth" in drop[0]["reason"]
    # The plan that follows is the planner's fastest candidate, unless that is
    # predicted less than MIN_GAIN faster than the current one: then the
    # decision keeps the current one and says so.  Both predictions are logged.
    best = min((c for c in drop[0]["candidates"] if c["feasible"]), key=lambda c: c["iteration_ms"])
    assert drop[0]["pick"] == [best["microbatches"], best["k"]]
    gain = 1 - best["iteration_ms"] / drop[0]["predicted_old_ms"]
    if drop[0]["pick"] == drop[0]["old"]:
        assert drop[0]["new"] == drop[0]["old"] and "kept" not in drop[0], drop[0]
    elif gain < MIN_GAIN:
        assert drop[0]["new"] == drop[0]["old"] and "kept" in drop[0], drop[0]
    else:
        assert drop[0]["new"] == drop[0]["pick"] and "kept" not in drop[0], drop[0]
    assert drop[0]["new"] == rep["plan_by_iter"][drop[0]["iteration"] + 1]
    assert drop[0]["predicted_new_ms"] <= drop[0]["predicted_old_ms"] * (1 + 1e-9)
    assert all(c["k"] <= c["max_k"] for c in drop[0]["candidates"])
    assert rep["predicted_ms"][0] is None and all(p > 0 for p in rep["predicted_ms"][1:])


def test_replans_after_a_real_link_drop_between_namespaces(tmp_path):
    """The short version of perf/pipeline/netns_replan.py: 3 stages in network
    namespaces, tern over tcp, every link dropped by tc from 1 Gbit/s to 100
    Mbit/s after batch 4: the probes see the new rate within three boundaries
    of the change (their median of 3 shows it at the second) and the runtime
    re-plans (or keeps its plan and says why)."""
    if os.geteuid() != 0:
        pytest.skip("needs root for ip netns and tc")
    perf = os.path.join(os.path.dirname(__file__), "..", "..", "perf")
    loader = importlib.machinery.SourceFileLoader
    compare = loader("compare", os.path.join(perf, "compare")).load_module()
    replan = loader("netns_replan", os.path.join(perf, "pipeline", "netns_replan.py")).load_module()
    args = argparse.Namespace(before="1gbit", after="100mbit", iterations=12, switch_at=4, threshold=0.5,
                              batch=128, width=256, emulate_ms=None)
    rep = replan.one_run(compare, args, None, str(tmp_path))
    first, *later = rep["decisions"]
    assert first["reason"] == "first measurement", first
    drop = [d for d in later if all(0.03 < g < 0.3 for g in d["bandwidth_gbps"])]
    # Before the drop every link read faster than after it (a loaded host's probe
    # can read 1 Gbit/s as 0.5, never 100 Mbit/s as more than 100).
    assert drop and min(first["bandwidth_gbps"]) > 1.5 * max(drop[0]["bandwidth_gbps"]), rep["decisions"]
    # seen once the change began (the boundary after the batch read before it probes
    # after that read, while tc changes the links) and within three boundaries of its end
    assert drop and rep["switched_before"] <= drop[0]["iteration"] <= rep["switched_after"] + 3, \
        (rep["switched_before"], rep["switched_after"], rep["decisions"])
    d = drop[0]
    assert d["new"] == (d["old"] if "kept" in d else d["pick"]), d
    assert rep["plan_by_iter"][d["iteration"] + 1] == d["new"]


def test_replan_keeps_a_plan_the_pick_barely_beats():
    """The decision rule without processes: the first measurement takes the
    planner's pick; later, a pick predicted less than MIN_GAIN faster than the
    current plan is logged and not taken, a larger gain is taken."""
    r = Replanner(Config(stages=3, plan=True, replan_threshold=0.1, **SMALL))
    times = {}
    r.candidates = lambda partition, rows: [dict(microbatches=m, k=k, max_k=m, iteration_ms=t, feasible=True)
                                           for (m, k), t in times.items()]
    r.predict = lambda partition, rows, m, k: times[(m, k)]
    row = dict(fwd_fixed_ms=0.1, fwd_ms_per_sample=0.01, bwd_fixed_ms=0.2, bwd_ms_per_sample=0.02,
               link_gbps=1.0, link_latency_us=10.0, background_cores=0.0, start=0.0, end=0.01)

    def decide(it, gbps, current):
        return r.decide(it, [2, 2, 2], [dict(row, link_gbps=gbps)] * 3, current)[:2]

    times.update({(2, 1): 10.0, (4, 2): 9.9})
    assert decide(0, 1.0, (2, 1)) == (4, 2)        # first measurement: the pick, whatever the gain
    times.update({(2, 1): 19.5, (4, 2): 20.0})
    r.history.clear()
    assert decide(1, 0.1, (4, 2)) == (4, 2)        # 2.5% predicted gain: kept
    assert r.decisions[-1]["pick"] == [2, 1] and "kept" in r.decisions[-1]
    times.update({(2, 1): 15.0, (4, 2): 20.0})
    r.history.clear()
    assert decide(2, 1.0, (4, 2)) == (2, 1)        # 25%: taken
    assert r.decisions[-1]["new"] == [2, 1] and "kept" not in r.decisions[-1]
    r.history.clear()
    assert decide(3, 0.1, (2, 1)) == (2, 1)        # the pick is the current plan: nothing kept back
    assert r.decisions[-1]["pick"] == [2, 1] and "kept" not in r.decisions[-1]


def test_host_cpu_no_stage_accounts_for_becomes_background_load():
    """With shared cores, the host's busy CPU beyond the stages' own (the
    kernel's network stack, another job) is spread over the stages'
    background load, summed over the last HOST_WINDOW batches."""
    r = Replanner(Config(stages=4, plan=True, **SMALL), cores=2)
    row = dict(background_cores=0.2, cpu_s=0.05, host_busy_s=0.3, start=0.0, end=0.1)
    got = r._with_host_load([row] * 4)      # 0.3 busy - 4 x 0.05 = 0.1 s over 0.1 s: one core, 1/4 each
    assert [round(x["background_cores"], 9) for x in got] == [0.45] * 4
    got = r._with_host_load([dict(row, host_busy_s=0.2)] * 4)   # nothing extra now: (0.1 + 0) / 0.2 s
    assert [round(x["background_cores"], 9) for x in got] == [0.325] * 4
    assert Replanner(Config(stages=4, **SMALL))._with_host_load([row] * 4) == [row] * 4  # a device each


def test_demo_cli_end_to_end(tmp_path):
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "tern.pipeline.demo", "--stages", "2", "--layers", "4", "--iterations", "3",
           "--schedule", "flush", "--microbatches", "4", "--k", "2", "--slow-stage", "1:3.0", "--seed", "5",
           "--batch", "32", "--save", str(tmp_path / "out"), "--report", str(report)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    rep = json.loads(report.read_text())
    for key in ("iteration_ms", "partition_by_iter", "plan_by_iter", "predicted_ms", "migrations", "weight_versions_ok"):
        assert key in rep
    assert len(rep["iteration_ms"]) == 3 and rep["partition_by_iter"] == [[2, 2]] * 3
    assert rep["plan_by_iter"] == [[4, 2]] * 3 and rep["migrations"] == [] and rep["weight_versions_ok"] is True
    assert sorted(final(tmp_path / "out")) == sorted(f"layers.{i}.{p}" for i in range(4) for p in ("weight", "bias"))
    # The event log: stage 1 (slowed 3x) computes longer than stage 0 on the same layers.
    def median_fwd(s):
        with open(tmp_path / "out" / f"events-stage{s}.json") as f:
            d = sorted(e["end"] - e["start"] for e in json.load(f) if e["kind"] == "fwd")
        return d[len(d) // 2]
    assert median_fwd(1) > 1.5 * median_fwd(0)


def session_members(sid):
    """The processes of session `sid` (a launcher started in a session of its own, and all it started)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields after the name: state, ppid, pgrp, session
            pids.append(int(pid))
    return pids


def test_a_killed_launcher_leaves_no_stage_behind(tmp_path):
    """The demo is killed (SIGKILL) while its 3 stages train: the stages (forked
    from the launcher's fork server) and the server end within seconds."""
    cmd = [sys.executable, "-m", "tern.pipeline.demo", "--stages", "3", "--iterations", "10000", "--emulate-ms", "5:10"]
    demo_proc = subprocess.Popen(cmd, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(session_members(demo_proc.pid)) < 5 and time.monotonic() < deadline:  # demo, server, 3 stages
            time.sleep(0.2)
        assert len(session_members(demo_proc.pid)) >= 5, "the stages never started"
    finally:
        demo_proc.kill()
        demo_proc.wait()
    deadline = time.monotonic() + 10
    while session_members(demo_proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = session_members(demo_proc.pid)
    for pid in left:
        os.kill(pid, 9)
    assert not left, "stages outlived the launcher: %s" % left


def assert_every_stage_fails(cfg, where, dead, within):
    """The run fails on every stage within `within` seconds: `dead` exits
    with the fault's status 3, the others fail on their own (tern reports
    the dead peer); nobody hangs or is killed by the launcher."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        run(cfg, where)
    assert time.monotonic() - t0 < within
    msg = str(err.value)
    assert "stage %d exited with status 3" % dead in msg, msg
    for s in range(cfg.stages):
        assert "stage %d exited" % s in msg, msg
    assert "killed" not in msg


def test_a_dead_stage_is_an_error_on_every_stage(tmp_path, monkeypatch):
    """Stage 1 dies mid-run: stages 0 and 2 fail on their own well within the timeout."""
    monkeypatch.setenv("TERN_PIPELINE_FAULT", "1:4")
    cfg = Config(stages=3, schedule="async", microbatches=4, timeout=20, **dict(SMALL, iterations=100000))
    assert_every_stage_fails(cfg, str(tmp_path), dead=1, within=60)


@pytest.mark.parametrize("flags,sentence", [
    (["--k", "2", "--plan"], "either --plan or --microbatches/--k"),
    (["--schedule", "async", "--plan"], "only --schedule flush has"),
    (["--microbatches", "5"], "must be a positive divisor of --batch 64"),
    (["--microbatches", "4", "--k", "5"], "between 1 and --microbatches 4"),
    (["--slow-stage", "7:2"], "stages are 0..2"),
    (["--slow-stage", "1:0.5"], "at least 1"),
    (["--slow-stage", "one"], "--slow-stage: must look like STAGE:FACTOR (int:float), not 'one'."),
    (["--partition", "1,1"], "must give each of the 3 stages"),
    (["--layers", "2"], "cannot fill 3 stages"),
    (["--width", "10"], "smaller than the 64 input features"),
])
def test_bad_flags_are_refused_with_a_sentence(flags, sentence, capsys, tmp_path):
    base = {"--stages": "3", "--layers": "6", "--iterations": "2", "--schedule": "flush", "--seed": "1",
            "--save": str(tmp_path), "--report": str(tmp_path / "r.json")}
    argv = []
    for key, value in base.items():
        if key not in flags:
            argv += [key, value]
    with pytest.raises(SystemExit) as exit_info:
        demo.main(argv + flags)
    assert exit_info.value.code == 2
    assert sentence in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "r.json")
