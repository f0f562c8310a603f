"""tern.planner / tern.priority over libtern_planner.so, tern-plan's and
tern.gantt's charts, the kFkB order and levels the pipeline runtime and the
scheduler take from the library, and the inputs measured from torch models
(profile, trace_graph)."""
import json
import os
import pathlib
import subprocess
import xml.etree.ElementTree as ET

import pytest

import tern.planner as planner
import tern.priority as priority

TERN_PLAN = os.environ.get("TERN_PLAN") or str(
    pathlib.Path(planner.__file__).resolve().parents[2] / "tools" / "tern-plan")  # build/python/tern -> build/tools

MODEL = {"batch_size": 16,
         "stages": [{"fwd_ms_per_sample": f, "bwd_ms_per_sample": 2 * f, "activation_bytes_per_sample": 2e5,
                     "static_bytes": 1e8, "memory_bytes": 1e8 + 2e5 * 8} for f in (0.5, 0.7, 0.4)],
         "network": [{"bandwidth_gbps": 2.0, "latency_us": 50}, {"bandwidth_gbps": 0.5, "latency_us": 50}]}

# recv a unblocks 1 ms of compute, recv b 10 ms (docs/DESIGN.md's graph format).
FORK = {"ops": [
    {"id": "a", "kind": "recv", "deps": [], "time_ms": 2, "param": "A", "bytes": 1000},
    {"id": "b", "kind": "recv", "deps": [], "time_ms": 2, "param": "B", "bytes": 1000},
    {"id": "ca", "kind": "compute", "deps": ["a"], "time_ms": 1},
    {"id": "cb", "kind": "compute", "deps": ["b"], "time_ms": 10},
    {"id": "join", "kind": "compute", "deps": ["ca", "cb"], "time_ms": 1}]}


def tern_plan(*args):
    return subprocess.run([TERN_PLAN, *map(str, args)], capture_output=True, text=True)


def test_schedule_is_the_cli_plan(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(MODEL))
    plan = planner.schedule(MODEL)
    assert plan == json.loads(tern_plan("schedule", path).stdout)
    assert plan == planner.schedule(str(path))
    best = plan["best"]
    assert best["microbatches"] * best["microbatch_size"] == MODEL["batch_size"]
    # Memory holds 8 samples of activations: whole-batch splits cannot fit.
    assert [c["feasible"] for c in plan["candidates"]][0] is False
    feasible = [c for c in plan["candidates"] if c["feasible"]]
    assert best["iteration_ms"] == min(c["iteration_ms"] for c in feasible)


def test_max_k_is_the_largest_k_that_fits_memory():
    # docs/DESIGN.md's rule, evaluated here independently of the library:
    # static_s + min(m, K (p - s)) (batch / m) act_s <= memory_s at every stage s.
    p, batch = len(MODEL["stages"]), MODEL["batch_size"]

    def fits(m, k):
        return all(st["static_bytes"] + min(m, k * (p - s)) * (batch // m) * st["activation_bytes_per_sample"]
                   <= st["memory_bytes"] for s, st in enumerate(MODEL["stages"]))

    cands = planner.schedule(MODEL)["candidates"]
    assert any(0 < c["max_k"] < c["microbatches"] for c in cands)  # memory really binds somewhere
    for c in cands:
        m = c["microbatches"]
        assert c["max_k"] == max([k for k in range(1, m + 1) if fits(m, k)], default=0)
        assert c["k"] <= c["max_k"]


def test_network_now_replans_slower(tmp_path):
    slow = planner.schedule(MODEL, network_now=0.05)["best"]
    assert slow["iteration_ms"] > planner.schedule(MODEL)["best"]["iteration_ms"]
    path = tmp_path / "model.json"
    path.write_text(json.dumps(MODEL))
    assert json.loads(tern_plan("schedule", path, "--network-now", 0.05).stdout)["best"] == slow


def test_errors_name_the_field():
    bad = json.loads(json.dumps(MODEL))
    bad["stages"][2]["memory_bytes"] = 0
    with pytest.raises(ValueError, match=r"stages\[2\]\.memory_bytes must be positive"):
        planner.schedule(bad)
    with pytest.raises(ValueError, match="does not divide batch_size 16"):
        planner.schedule(MODEL, microbatches=3)
    with pytest.raises(ValueError, match="network_now"):
        planner.schedule(MODEL, network_now=-1)


def test_svg_gantt_is_well_formed_and_complete(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(MODEL))
    out = tmp_path / "plan.svg"
    assert tern_plan("schedule", path, "--gantt", out).returncode == 0
    root = ET.parse(out).getroot()  # raises on malformed XML
    ns = "{http://www.w3.org/2000/svg}"
    best = planner.schedule(MODEL)["best"]
    title = next(t.text for t in root.iter(ns + "text") if t.text and t.text.startswith("kFkB"))
    assert f"m = {best['microbatches']} " in title and f"K = {best['k']}," in title
    events = planner.trace(MODEL)["events"]
    p, m = len(MODEL["stages"]), best["microbatches"]
    assert len(events) == 2 * m * p + 2 * m * (p - 1)
    colours = {"#4c78a8", "#f58518", "#54a24b", "#b279a2"}  # forward, backward, both transfers
    bars = [r for r in root.iter(ns + "rect") if r.get("fill") in colours]
    assert len(bars) == len(events) + len(colours)  # every event, and the legend's swatches


def test_png_gantt_by_cli_and_python(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    path = tmp_path / "model.json"
    path.write_text(json.dumps(MODEL))
    pictures = []
    for out, make in ((tmp_path / "cli.png", lambda o: tern_plan("schedule", path, "--gantt", o)),
                      (tmp_path / "py.png", lambda o: planner.gantt(MODEL, str(o)))):
        make(out)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        pictures.append(image.imread(str(out)))
    cli, py = pictures
    assert cli.shape == py.shape and (cli == py).all()  # one painter of one chart
    assert cli.shape[1] == 1800  # the SVG's 1200 px at 1.5 device pixels each
    colours = {tuple(int(c * 255 + 0.5) for c in px[:3]) for px in cli.reshape(-1, cli.shape[2])}
    for hex_colour in ("4c78a8", "f58518", "54a24b", "b279a2"):  # forward, backward, both transfers
        assert tuple(int(hex_colour[i:i + 2], 16) for i in (0, 2, 4)) in colours


def test_one_chart_for_the_plan_and_any_trace(tmp_path):
    """tern.gantt.draw of the planner's trace is the chart planner.gantt and
    tern-plan write; a measured trace draws the same way, checked alike."""
    from tern import gantt
    path = tmp_path / "model.json"
    path.write_text(json.dumps(MODEL))
    assert tern_plan("schedule", path, "--gantt", tmp_path / "cli.svg").returncode == 0
    planner.gantt(MODEL, str(tmp_path / "py.svg"))
    gantt.draw(planner.trace(MODEL), str(tmp_path / "trace.svg"))
    charts = {(tmp_path / name).read_text() for name in ("cli.svg", "py.svg", "trace.svg")}
    assert len(charts) == 1
    measured = {"title": "measured, batch 3", "stages": 2, "iteration_ms": 3.0,
                "events": [{"kind": "forward", "stage": 1, "micro": 0, "start_ms": 0.5, "end_ms": 3}]}
    gantt.draw(measured, str(tmp_path / "measured.svg"))
    assert "measured, batch 3" in (tmp_path / "measured.svg").read_text()
    bad = {**measured, "events": [{**measured["events"][0], "stage": 2}]}
    with pytest.raises(ValueError, match=r"events\[0\]\.stage must be from 0 to 1"):
        gantt.draw(bad, str(tmp_path / "bad.svg"))
    with pytest.raises(ValueError, match=r"\.svg or \.png"):
        gantt.draw(measured, str(tmp_path / "measured.pdf"))


def test_priorities_tac_orders_by_cost_tic_ties():
    tac = priority.assign(FORK, "tac")
    assert tac["policy"] == "tac" and tac["order"] == ["B", "A"]
    assert tac["priority"]["B"] < tac["priority"]["A"]
    assert priority.assign(FORK, "tic")["priority"] == {"A": 0, "B": 0}
    e = priority.efficiency(FORK, "tac", samples=64)
    assert e["efficiency"] == pytest.approx(2 / 3)
    assert 1 / 3 < e["random_efficiency"] < 2 / 3
    with pytest.raises(ValueError, match="tic or tac"):
        priority.assign(FORK, "fifo")


def test_priorities_cli_matches(tmp_path):
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(FORK))
    run = tern_plan("priorities", path, "--policy", "tac")
    assert run.returncode == 0
    assert json.loads(run.stdout) == priority.assign(FORK, "tac")
    assert "random_efficiency" in run.stderr


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_the_pipeline_order_is_the_libraries(torch):
    from tern.pipeline.schedule import BACKWARD as B, FORWARD as F, kfkb_order
    assert kfkb_order(6, 2, 3, 1) == [(F, 0), (F, 1), (F, 2), (F, 3), (B, 0), (B, 1), (F, 4), (F, 5),
                                      (B, 2), (B, 3), (B, 4), (B, 5)]
    with pytest.raises(ValueError, match=r"^K must be between 1 and the micro-batch count 4, not 5\.$"):
        kfkb_order(4, 5, 2, 0)
    with pytest.raises(ValueError, match=r"^stage 2 is not one of 0\.\.1\.$"):
        kfkb_order(4, 1, 2, 2)


def test_layer_levels_are_the_libraries(torch):
    import tern
    from tern import scheduler_plan
    assert (scheduler_plan.LEVELS, scheduler_plan.FIFO_LEVEL) == (tern.PRIORITY_LEVELS, tern.PRIORITY_DEFAULT)
    assert scheduler_plan.levels_of({"a": 5, "b": 7, "c": 5, "d": 9}) == {"a": 0, "b": 2, "c": 0, "d": 5}
    levels = scheduler_plan.levels_of({f"p{i}": i for i in range(20)})
    assert levels["p0"] == 0 and levels["p19"] == tern.PRIORITY_LEVELS - 1


def test_profile_measures_an_mlp(torch, tmp_path):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 96),
                              torch.nn.ReLU(), torch.nn.Linear(96, 10))
    doc = planner.profile(mlp, torch.randn(16, 64), stages=[2, 2, 1], batch_size=64, memory_bytes=1e9,
                          path=str(tmp_path / "mlp.json"), repeats=2)
    assert json.loads((tmp_path / "mlp.json").read_text()) == doc
    s = doc["stages"]
    assert [st["output_bytes_per_sample"] for st in s] == [128 * 4, 96 * 4, 10 * 4]
    # Linear saves its input, ReLU its output: 64 + 128 floats a sample at stage 0.
    assert s[0]["activation_bytes_per_sample"] == (64 + 128) * 4
    assert s[0]["static_bytes"] == 2 * (64 * 128 + 128) * 4
    assert all(st["fwd_ms_per_sample"] > 0 and st["bwd_ms_per_sample"] > 0 for st in s)
    assert planner.schedule(doc)["best"]["microbatches"] in (1, 2, 4, 8, 16, 32, 64)


def test_trace_graph_of_a_cnn(torch, tmp_path):
    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            x = torch.relu(self.conv1(x))
            x = torch.relu(self.conv2(x)) + x  # a residual add: functional glue between modules
            return self.fc(torch.flatten(x, 1))

    net = CNN()
    graph = planner.trace_graph(net, torch.randn(4, 3, 8, 8), path=str(tmp_path / "g.json"), repeats=2)
    ops = {op["id"]: op for op in graph["ops"]}
    assert {op["param"] for op in graph["ops"] if op["kind"] == "recv"} == {n for n, _ in net.named_parameters()}
    assert set(ops["fwd:conv2"]["deps"]) == {"fwd:conv1", "recv:conv2.weight", "recv:conv2.bias"}
    assert {"fwd:conv1", "fwd:conv2"} <= set(ops["fwd:fc"]["deps"])  # through the residual add
    assert ops["recv:fc.weight"]["bytes"] == 8 * 8 * 8 * 10 * 4
    tic = priority.assign(str(tmp_path / "g.json"), "tic")
    assert set(tic["order"][:2]) == {"conv1.weight", "conv1.bias"}
    assert tic["priority"]["conv1.weight"] == 0 and tic["priority"]["fc.weight"] > 0
