"""Live layer migration in tern.pipeline (docs/DESIGN.md, "The
migration protocol"), both schedules:

- final weights bitwise equal to the same run without migration, both
  directions (the outgoing stage before or after the receiver), 1 and 2
  layers, 3 stages; two disjoint pairs at once with 4 stages;
- the protocol's timing rules, from the stages' event logs: the message at
  batch k before the forward (or backward), the pushes before each forward,
  the installs after each backward, the switch at k+1 / k+2;
- a peer dying mid-migration: an error on every stage within the timeout;
- async PipeDream 1F1B: alternating computation (forwards on the new
  partition, backwards on their forward's), every backward on its forward's
  weight version, no micro-batch dropped or repeated, the micro-batch
  offsets of the protocol;
- --rebalance: a layer moved off a slowed stage, decided and logged with
  the planner's predicted gain, bitwise equal to the run without it; and
  moved back when the stage recovers, ending on the partition it started
  with, still bitwise;
- --rebalance under async: decided at the 1F1B steady state's mini-batch
  boundaries without a collective, migrated live, weight versions kept;
- the demo CLI and its refusals.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

from tern.pipeline import Config, run
from tern.pipeline.migration import switch_batch
from tern.pipeline.rebalance import Rebalancer, op_ms
from test_pipeline import assert_every_stage_fails
from test_pipeline import test_bad_flags_are_refused_with_a_sentence as refused  # the demo's flag check

BASE = dict(width=64, batch=32, iterations=5, lr=0.1, seed=3, schedule="flush", microbatches=4, k=1)


def final(directory):
    return torch.load(os.path.join(directory, "final.pt"))


def events(directory, stage):
    with open(os.path.join(directory, f"events-stage{stage}.json")) as f:
        return json.load(f)


def assert_bitwise(got_dir, want_dir):
    got, want = final(got_dir), final(want_dir)
    assert list(got) == list(want)
    for name in want:
        assert torch.equal(got[name], want[name]), f"{name} differs from the run without migration"


def check_timing(out, k, src, dst, n):
    """Every step of migration (k, src, dst, n) at the batch and the point of
    it that the protocol names, on both stages' own clocks (one host clock)."""
    o, r = events(out, src), events(out, dst)
    switch = switch_batch(k, src, dst)

    def of(evs, kind, it):
        return [e for e in evs if e["kind"] == kind and e["iteration"] == it]

    def first(evs, kind, it):
        return min(e["start"] for e in of(evs, kind, it))

    def last(evs, kind, it):
        return max(e["end"] for e in of(evs, kind, it))

    op = "fwd" if src < dst else "bwd"  # step 1: before the next forward (FROM before TO) or backward
    (sent,) = [e for e in o if e["kind"] == "mig_msg"]
    (got,) = [e for e in r if e["kind"] == "mig_msg"]
    assert sent["iteration"] == got["iteration"] == k
    assert sent["start"] > last(o, "opt", k - 1) if k > 0 else True
    if src > dst:  # sent at the first backward of k: the batch's first forward had begun
        assert sent["start"] > first(o, "fwd", k)
    assert got["end"] <= first(r, op, k)
    (prep,) = [e for e in r if e["kind"] == "mig_prepare"]
    assert prep["iteration"] == k and prep["end"] <= first(r, op, k) and len(prep["layers"]) == n
    # Step 3: pushed before each forward from the split on (right after the step that
    # made the weights), installed after each backward.
    pushes = [e for e in o if e["kind"] == "mig_push"]
    assert [e["iteration"] for e in pushes] == list(range(k + 1, switch + 1))
    for e in pushes:
        assert e["version"] == e["iteration"] and e["end"] <= first(o, "fwd", e["iteration"])
        assert e["start"] >= last(o, "opt", e["iteration"] - 1)
    installs = [e for e in r if e["kind"] == "mig_install"]
    assert [e["iteration"] for e in installs] == list(range(k, switch))
    for e in installs:
        b = e["iteration"]
        assert e["version"] == b + 1
        assert e["start"] >= last(r, "bwd", b) and e["start"] >= last(r, "opt", b)
        assert e["end"] <= first(r, "fwd", b + 1)
    # Step 4: both switch between the last batch on the old partition and the first on the new.
    for evs in (o, r):
        (sw,) = [e for e in evs if e["kind"] == "mig_switch"]
        assert sw["iteration"] == switch and len(sw["layers"]) == n
        assert sw["start"] >= last(evs, "opt", switch - 1) and sw["end"] <= first(evs, "fwd", switch)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same runs without migration, by (stages, layers)."""
    refs = {}

    def get(stages, layers, partition):
        key = (stages, layers, tuple(partition))
        if key not in refs:
            out = tmp_path_factory.mktemp(f"ref{stages}")
            refs[key] = (out, run(Config(stages=stages, layers=layers, partition=partition, **BASE), str(out)))
        return refs[key]
    return get


@pytest.mark.parametrize("mig,partitions", [
    ((1, 1, 2, 1), [[2, 3, 2]] * 2 + [[2, 2, 3]] * 3),   # outgoing before the receiver, 1 layer
    ((1, 1, 0, 2), [[2, 3, 2]] * 3 + [[4, 1, 2]] * 2),   # outgoing after the receiver, 2 layers
    ((0, 2, 1, 1), [[2, 3, 2]] * 2 + [[2, 4, 1]] * 3),   # from the last stage, at the first batch
])
def test_flush_migration_is_bitwise_and_on_time(tmp_path, reference, mig, partitions):
    ref_dir, ref = reference(3, 7, [2, 3, 2])
    k, src, dst, n = mig
    rep = run(Config(stages=3, layers=7, partition=[2, 3, 2], migrate=[list(mig)], **BASE), str(tmp_path))
    assert rep["partition_by_iter"] == partitions
    moved = list(range(2 + 3 - n, 5)) if dst > src else (list(range(2, 2 + n)) if src == 1 else [5])
    assert rep["migrations"] == [{"from": src, "to": dst, "layers": moved, "message_iter": k,
                                  "done_iter": switch_batch(k, src, dst)}]
    assert_bitwise(tmp_path, ref_dir)
    assert rep["loss"] == ref["loss"]
    check_timing(tmp_path, k, src, dst, n)


def test_two_disjoint_pairs_at_once(tmp_path, reference):
    ref_dir, _ = reference(4, 8, [2, 2, 2, 2])
    migs = [[1, 0, 1, 1], [1, 3, 2, 1]]
    rep = run(Config(stages=4, layers=8, partition=[2, 2, 2, 2], migrate=migs, **BASE), str(tmp_path))
    assert rep["partition_by_iter"] == [[2, 2, 2, 2]] * 2 + [[1, 3, 2, 2]] + [[1, 3, 3, 1]] * 2
    assert [(m["from"], m["to"], m["layers"]) for m in rep["migrations"]] == [(0, 1, [1]), (3, 2, [6])]
    assert_bitwise(tmp_path, ref_dir)
    for m in migs:
        check_timing(tmp_path, *m)


@pytest.mark.parametrize("schedule", ["flush", "async"])
def test_a_peer_dying_mid_migration_is_an_error_on_every_stage(tmp_path, monkeypatch, schedule):
    """Stage 0 (the receiver) dies right after opening the weight stream:
    stage 1 (pushing) and stage 2 (not in the migration) fail on their own,
    within the timeout, nobody hangs or is killed."""
    monkeypatch.setenv("TERN_MIGRATION_FAULT", "0")
    cfg = Config(stages=3, layers=6, migrate=[[1, 1, 0, 1]], timeout=10,
                 **dict(BASE, iterations=6, schedule=schedule))
    assert_every_stage_fails(cfg, str(tmp_path), dead=0, within=45)


def test_demo_cli_migrates(tmp_path):
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "tern.pipeline.demo", "--stages", "3", "--layers", "6", "--iterations", "4",
           "--schedule", "flush", "--microbatches", "4", "--seed", "2", "--batch", "32",
           "--migrate", "1:0:1:1", "--save", str(tmp_path / "out"), "--report", str(report)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    rep = json.loads(report.read_text())
    assert rep["migrations"] == [{"from": 0, "to": 1, "layers": [1], "message_iter": 1, "done_iter": 2}]
    assert rep["partition_by_iter"] == [[2, 2, 2]] * 2 + [[1, 3, 2]] * 2
    assert "migration: layers [1] stage 0 -> 1" in done.stdout


@pytest.mark.parametrize("flags,sentence", [
    (["--migrate", "1:0:2:1"], "FROM and TO must be adjacent"),
    (["--migrate", "1:0:1:2"], "must keep at least one"),
    (["--migrate", "2:2:1:1"], "after the last of --iterations 3"),
    (["--migrate", "0:1:2:1", "--migrate", "0:1:0:1"], "pairs migrating at once must be disjoint"),
    (["--migrate", "1:0:1"], "must look like ITER:FROM:TO:NLAYERS"),
    (["--migrate", "0:0:1:1", "--schedule", "async", "--microbatches", "4"], "under async it spans micro-batches -1..3"),
    (["--slow-stage", "1:2.0@5-3"], "must look like STAGE:FACTOR@FROM-TO (batches FROM..TO-1, 0 <= FROM < TO)"),
    (["--slow-stage", "1:2.0@x"], "not '1:2.0@x'"),
])
def test_bad_migrations_are_refused_with_a_sentence(flags, sentence, capsys, tmp_path):
    refused(flags + ["--iterations", "3"], sentence, capsys, tmp_path)


# ---- async (PipeDream 1F1B with weight stashing) ----

def check_async_run(out, rep, stages, m, iterations, mig):
    """Alternating computation and the protocol's micro-batch offsets, from the event logs."""
    it, src, dst, n = mig
    k, d = it * m, stages - max(src, dst)
    switch = k + 1 if src < dst else k + 2
    total = iterations * m
    logs = {s: events(out, s) for s in range(stages)}

    def num(e):
        return e["iteration"] * m + e["micro"]

    for s, evs in logs.items():
        fwd = {num(e): e for e in evs if e["kind"] == "fwd"}
        bwd = {num(e): e for e in evs if e["kind"] == "bwd"}
        # No micro-batch dropped or repeated: each forward and backward once, at every stage.
        assert sorted(num(e) for e in evs if e["kind"] == "fwd") == list(range(total))
        assert sorted(num(e) for e in evs if e["kind"] == "bwd") == list(range(total))
        for j in range(total):
            # Every backward ran through the layers (and weights) of its own forward.
            assert bwd[j]["layers"] == fwd[j]["layers"] and bwd[j]["forward_version"] == fwd[j]["version"]
        if s in (src, dst):
            old, new = fwd[0]["layers"], fwd[total - 1]["layers"]
            assert len(new) - len(old) == (n if s == dst else -n)
            assert all(fwd[j]["layers"] == (old if j < switch else new) for j in range(total)), s
    o, r = logs[src], logs[dst]
    fo = {num(e): e for e in o if e["kind"] == "fwd"}
    fr = {num(e): e for e in r if e["kind"] == "fwd"}
    br = {num(e): e for e in r if e["kind"] == "bwd"}
    (got,) = [e for e in r if e["kind"] == "mig_msg"]
    assert num(got) == k + 1 - d and got["end"] <= br[k + 1 - d]["start"]
    pushes = [e for e in o if e["kind"] == "mig_push"]
    assert [e["n"] for e in pushes] == [e["version"] for e in pushes] == list(range(k + 1, k + 2 + d))
    assert all(e["end"] <= fo[e["n"]]["start"] for e in pushes)
    installs = [e for e in r if e["kind"] == "mig_install"]
    assert [e["n"] for e in installs] == list(range(k + 1 - d, k + 2))
    for e in installs:
        assert e["version"] >= e["n"] + d and e["start"] >= br[e["n"]]["end"]
        nxt = min(j for j in fr if fr[j]["start"] >= br[e["n"]]["end"])
        assert e["end"] <= fr[nxt]["start"] and nxt >= switch
    assert rep["weight_versions_ok"] is True
    assert rep["version_checks"] == stages * total


@pytest.mark.parametrize("mig", [(1, 1, 2, 1), (1, 1, 0, 2)])
def test_async_migration_keeps_weight_versions(tmp_path, mig):
    cfg = dict(BASE, schedule="async", iterations=4)
    rep = run(Config(stages=3, layers=7, partition=[2, 3, 2], migrate=[list(mig)], **cfg), str(tmp_path))
    check_async_run(tmp_path, rep, 3, 4, 4, mig)
    assert sorted(final(tmp_path)) == sorted(f"layers.{i}.{p}" for i in range(7) for p in ("weight", "bias"))
    assert all(loss == loss for loss in rep["loss"])  # finite: nothing torn
    (m,) = rep["migrations"]
    assert (m["from"], m["to"], m["message_iter"]) == mig[1:3] + (1,) and len(m["layers"]) == mig[3]


def test_async_two_disjoint_pairs_at_once(tmp_path):
    migs = [[1, 0, 1, 1], [1, 3, 2, 1]]
    cfg = dict(BASE, schedule="async", iterations=4)
    rep = run(Config(stages=4, layers=8, partition=[2, 2, 2, 2], migrate=migs, **cfg), str(tmp_path))
    for mig in migs:
        check_async_run(tmp_path, rep, 4, 4, 4, mig)
    assert rep["partition_by_iter"] == [[2, 2, 2, 2]] * 2 + [[1, 3, 3, 1]] * 2


# ---- --rebalance ----

def test_rebalance_moves_a_layer_off_the_slowed_stage(tmp_path):
    """Stage 1's device slowed 4x: the planner's model predicts a gain for
    moving one of its layers to a neighbour, the move is made live (and
    logged with the prediction), and the run's weights stay bitwise those
    of the same run without rebalancing.  The stages compute on emulated
    devices (3:6 ms per layer and micro-batch, tern.emulate): with real
    compute, three stages on a 2-core host preempted each other's ~0.5 ms
    ops for 4 ms scheduler ticks, a healthy stage's median op read as slow
    as a slowed one's, and the test needed an 8x slowdown and a host to
    itself."""
    cfg = dict(BASE, width=512, iterations=8, emulate_ms=[3.0, 6.0], slow={"1": 4.0})
    rep = run(Config(stages=3, layers=6, rebalance=True, rebalance_threshold=0.05, **cfg), str(tmp_path / "re"))
    moves = [e for e in rep["rebalance"] if e["action"] == "move"]
    # Every boundary's entry whole (a dict's repr would be cut short): once, on
    # a loaded host, every boundary held with the right move named.
    assert moves, "\n".join(json.dumps(e) for e in rep["rebalance"])
    assert all(e["predicted_gain"] > 1.05 and e["best_move"][0] == 1 for e in moves)
    assert len(rep["rebalance"]) == 7  # every boundary evaluated and logged, moves and holds
    (mig,) = rep["migrations"]
    assert mig["from"] == 1 and mig["to"] in (0, 2) and mig["message_iter"] == moves[0]["iteration"] + 1
    assert rep["partition_by_iter"][-1][1] == 1
    run(Config(stages=3, layers=6, **cfg), str(tmp_path / "plain"))
    assert_bitwise(tmp_path / "re", tmp_path / "plain")


def test_rebalance_moves_the_layer_back_when_the_stage_recovers(tmp_path):
    """Stage 1's device is slowed 6x in batches 0-7 only (--slow-stage
    1:6.0@0-8): a layer moves off it, and once it computes at full speed
    again the policy undoes that move ("move back", logged with its
    predicted gain), so the run ends on the partition it started with; the
    weights stay bitwise those of the same run without rebalancing.  Emulated
    devices (3:6 ms per layer and micro-batch), as above.

    20 batches: the move back comes at boundary 11 (stage 1's history, a
    median of 5 batches, reads healthy from boundary 10, and a move needs
    two in a row); after it nothing is decided for 3 boundaries and a new
    move needs 4 in a row (flap damping), so none can start before 18, and
    none starts within 3 batches of the end.  The damping itself is shown
    on synthetic measurements below."""
    cfg = dict(BASE, width=512, iterations=20, emulate_ms=[3.0, 6.0], slow={"1": [6.0, 0, 8]})
    rep = run(Config(stages=3, layers=6, rebalance=True, rebalance_threshold=0.3, **cfg), str(tmp_path / "re"))
    acted = [e for e in rep["rebalance"] if e["action"] != "hold"]
    assert [e["action"] for e in acted] == ["move", "move back"], rep["rebalance"]
    off, back = acted
    assert off["best_move"][0] == 1 and off["predicted_gain"] > 1.3 and off["iteration"] < 8
    assert back["best_move"] == off["best_move"][::-1] and back["iteration"] >= 8
    assert back["predicted_gain"] > 1 / 1.3 and back["new_partition"] == [2, 2, 2]
    assert len(rep["rebalance"]) == 19  # every boundary evaluated and logged
    out, home = rep["migrations"]
    assert (out["from"], out["to"]) == tuple(off["best_move"]) and (home["from"], home["to"]) == (out["to"], 1)
    assert home["layers"] == out["layers"]  # the same layer went back
    parts = rep["partition_by_iter"]
    assert parts[0] == parts[-1] == [2, 2, 2] and [2, 2, 2] not in parts[out["done_iter"]:home["done_iter"]]
    run(Config(stages=3, layers=6, **cfg), str(tmp_path / "plain"))
    assert_bitwise(tmp_path / "re", tmp_path / "plain")


def test_async_rebalance_moves_a_layer_off_the_slowed_stage(tmp_path):
    """Async 1F1B on emulated devices (3:6 ms per layer and micro-batch),
    stage 1 three times slower: stage 0 decides at its mini-batch boundary
    from the rows the stages sent it, every stage learns the move before its
    first protocol point, the layer moves live and every backward still used
    its forward's weights."""
    cfg = dict(BASE, schedule="async", iterations=16, emulate_ms=[3.0, 6.0], slow={"1": 3.0})
    rep = run(Config(stages=3, layers=9, rebalance=True, **cfg), str(tmp_path / "re"))
    moves = [e for e in rep["rebalance"] if e["action"] == "move"]
    assert moves and moves[0]["best_move"][0] == 1, rep["rebalance"]
    assert len(rep["rebalance"]) == 16 - 2  # stage 0's boundaries 0..iterations-3, every one logged
    first = rep["migrations"][0]
    assert (first["from"], first["message_iter"]) == (1, moves[0]["iteration"] + 3)  # LOOKAHEAD: 2 + ceil(3 / 4)
    assert rep["partition_by_iter"][0] == [3, 3, 3] and rep["partition_by_iter"][-1][1] < 3
    assert rep["weight_versions_ok"] and rep["version_checks"] == 3 * 4 * 16
    assert sum(rep["overruns"]) < 3 * 2 * 4 * 16 // 10, rep["overruns"]


def test_rebalance_policy_damps_flapping():
    """The policy alone, on synthetic measurements: a stage slowed 6x gets a
    layer moved off after two boundaries; nothing is decided for the three
    boundaries after each partition change (settling); once the stage has
    recovered the move is undone; then a noise spike (one stage 2x for two
    boundaries, enough before the first move back) no longer moves a layer,
    because each move back doubles the boundaries in a row a move must be
    worth making at; a slowdown that lasts (four boundaries) is still
    relieved."""
    class Model:  # the iteration is its slowest stage's op (enough for the policy)
        cfg = type("Cfg", (), {"batch": 32})

        def predict(self, partition, rows, m, k):
            return max(op_ms(r, self.cfg.batch // m) for r in rows)

    def rows(partition, slow):  # 1 ms per layer per sample, times each stage's slowdown
        return [dict(fwd_fixed_ms=0.0, bwd_fixed_ms=0.0, fwd_ms_per_sample=n * slow.get(i, 1.0),
                     bwd_ms_per_sample=0.0) for i, n in enumerate(partition)]

    policy, part = Rebalancer(Model(), 0.3), [2, 2, 2]
    slow_by_boundary = [{1: 6.0}] * 4 + [{}] * 6 + [{2: 2.0}] * 2 + [{}] * 2 + [{0: 3.0}] * 4
    acted = []
    for it, slow in enumerate(slow_by_boundary):
        move = policy.decide(it, part, rows(part, slow), 4, 1, True)
        if move:
            acted.append((it, policy.log[-1]["action"], move))
            part = policy.log[-1]["new_partition"]
    assert [a[1] for a in acted] == ["move", "move back", "move"], policy.log
    (it0, _, off), (it1, _, back), (it2, _, late) = acted
    assert it0 == 1 and off[0] == 1 and back == off[::-1] and it1 == 6  # settled at 2-4, then 2 in a row
    assert all(e["settling"] for e in policy.log[2:5] + policy.log[7:10])
    assert it2 == 17 and late[0] == 0  # the lasting slowdown, after 4 boundaries
    assert policy.persist == 4 and all(e["action"] == "hold" for e in policy.log[10:14])


# ---- the migration's own flow ----

@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_the_migration_travels_at_levels_of_its_own(tmp_path, transport):
    """With every priority level its own network flow class (flow_classes=8),
    the per-class byte counts (ternCommGetFlowStats) after a migration show
    the moving weights only at the stream's level and the message only at
    the migration's: the activations' level carries the activations,
    gradients and probes of the event log and nothing else, so no migration
    byte ever sat in the activations' fifo (tern gives each level its own
    connection).  The wire adds the same framing to every message: stage 0,
    which takes no part in the migration, gives the per-message figure."""
    rep = run(Config(stages=3, layers=7, partition=[2, 3, 2], migrate=[[1, 1, 2, 1]], flow_classes=8,
                     transport=transport, **BASE), str(tmp_path))
    lv, flows = rep["levels"], rep["flow_stats"]
    assert len({lv["migration"], lv["pipeline"], lv["control"], lv["stream"]}) == 4
    layer_bytes = (64 * 64 + 64) * 4
    pushes = len([e for e in events(tmp_path, 1) if e["kind"] == "mig_push"])
    framing = []  # (wire bytes beyond the payloads, messages) at the pipeline's level, per stage
    for s, fs in enumerate(flows):
        assert fs["flow_classes"] == 8
        ops = [e for e in events(tmp_path, s)
               if e["kind"] in ("send_act", "send_grad", "recv_act", "recv_grad", "probe")]
        wire = fs["bytes_sent"][lv["pipeline"]] + fs["bytes_recv"][lv["pipeline"]]
        framing.append((wire - sum(e["bytes"] for e in ops), len(ops)))
    extra0, ops0 = framing[0]
    assert 0 <= extra0 < 64 * ops0
    assert all(extra * ops0 == extra0 * ops for extra, ops in framing), framing
    # The weights: from stage 1 to stage 2 at the stream's level, at least the final version
    # and at most every pushed one (a push may supersede one that had not started to move).
    sent, got = flows[1]["bytes_sent"][lv["stream"]], flows[2]["bytes_recv"][lv["stream"]]
    assert layer_bytes <= sent <= pushes * layer_bytes + 4096 and got == sent
    # The message (3 floats) and the one-float warm-up of each level: tiny, at the migration's level.
    assert 0 < flows[1]["bytes_sent"][lv["migration"]] < 1024
    # Stage 0 takes no part: nothing at either migration level.
    assert flows[0]["bytes_sent"][lv["stream"]] == flows[0]["bytes_sent"][lv["migration"]] == 0
