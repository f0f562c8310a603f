"""tern.emulate: device times honoured, no core held, overruns counted, the
math unchanged, gradients handed on only after the device time."""
import copy
import json
import subprocess
import sys
import threading
import time

import pytest
import torch

from tern import emulate


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


def batch(seed=1, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def timed_step(model, x, y):
    """(forward s, backward s, process CPU s) of one training step."""
    cpu, t0 = time.process_time(), time.monotonic()
    out = model(x)
    t1 = time.monotonic()
    torch.nn.functional.cross_entropy(out, y).backward()
    t2 = time.monotonic()
    return t1 - t0, t2 - t1, time.process_time() - cpu


def test_device_time_is_honoured_without_holding_a_core():
    model = emulate.wrap(mlp(), emulate.uniform(15, 30))  # 3 layers: 45 ms forward, 90 ms backward
    x, y = batch()
    timed_step(model, x, y)  # warm-up (the first call allocates)
    steps = [timed_step(model, x, y) for _ in range(4)]
    fwd = sorted(s[0] for s in steps)[1]
    bwd = sorted(s[1] for s in steps)[1]
    assert 0.045 <= fwd < 0.045 + 0.008, f"forward took {fwd * 1e3:.1f} ms for 45 ms of device time"
    assert 0.090 <= bwd < 0.090 + 0.008, f"backward took {bwd * 1e3:.1f} ms for 90 ms of device time"
    cpu = sum(s[2] for s in steps)
    wall = sum(s[0] + s[1] for s in steps)
    assert cpu < 0.25 * wall, f"the emulated device held a core: {cpu:.3f} s CPU in {wall:.3f} s"
    rep = emulate.report(model)
    assert rep["overruns"] == 0 and rep["ops"] == 5 * 6 and rep["device_ms"] == pytest.approx(5 * 3 * 45)
    assert [r["calls"] for r in rep["layers"]] == [5, 5, 5] and [r["backwards"] for r in rep["layers"]] == [5, 5, 5]


def test_gradients_and_weights_equal_the_unwrapped_module():
    plain, wrapped = mlp(), emulate.wrap(mlp(), emulate.uniform(1, 2))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (plain, wrapped)]
    for step in range(3):
        x, y = batch(seed=step)
        for m, opt in zip((plain, wrapped), opts):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
        for a, b in zip(plain.parameters(), wrapped.parameters()):
            assert torch.equal(a.grad, b.grad)
        for opt in opts:
            opt.step()
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), wrapped.parameters()))
    emulate.unwrap(wrapped)
    assert all(type(m).forward is not None and "forward" not in vars(m) for m in wrapped.modules())


def test_overruns_are_counted_not_hidden():
    model = emulate.wrap(mlp(), emulate.uniform(0, 0))  # any real math outlasts 0 ms
    x, y = batch()
    timed_step(model, x, y)
    rep = emulate.report(model)
    assert rep["ops"] == 6 and rep["overruns"] == 6
    slow = emulate.wrap(mlp(), emulate.uniform(50, 50))
    timed_step(slow, x, y)
    assert emulate.report(slow)["overruns"] == 0


def test_a_gradient_leaves_the_layer_only_after_its_device_time():
    """DDP's and PriorityScheduler's hooks sit on the parameters' gradient
    accumulators: they must fire once the backward's device time is over."""
    layer = torch.nn.Linear(16, 16)
    model = emulate.wrap(torch.nn.Sequential(layer), emulate.uniform(0, 60))
    fired = {}
    acc = layer.weight.expand_as(layer.weight).grad_fn.next_functions[0][0]
    acc.register_hook(lambda *_: fired.update(weight=time.monotonic()))
    out = model(torch.randn(4, 16, requires_grad=True))
    start = time.monotonic()
    out.sum().backward()
    assert fired["weight"] - start >= 0.060, f"the weight's gradient left after {(fired['weight'] - start) * 1e3:.1f} ms"


def test_the_gil_is_released_while_the_device_computes():
    model = emulate.wrap(mlp(), emulate.uniform(40, 40))
    counted, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1
    t = threading.Thread(target=count)
    t.start()
    try:
        x, _ = batch()
        model(x)
    finally:
        stop.set()
        t.join()
    assert counted[0] > 10000, f"another thread ran only {counted[0]} loop turns in 120 ms"


def test_scale_slows_the_device():
    model = emulate.wrap(mlp(), emulate.uniform(10, 0))
    x, _ = batch()
    model(x)
    emulate.device_of(model).scale = 2.0
    t0 = time.monotonic()
    model(x)
    assert time.monotonic() - t0 >= 0.060


def test_uniform_times_per_samples_scale_with_the_batch():
    model = emulate.wrap(mlp(), emulate.parse_ms("30:0@8"))  # 30 ms per 8 samples, per layer
    x, _ = batch(n=1)
    model(x)  # the first call's size must not stick (a pipeline calibrates with 1 sample)
    x, _ = batch(n=4)
    t0 = time.monotonic()
    model(x)
    assert time.monotonic() - t0 >= 3 * 0.015
    rep = emulate.report(model)
    assert [r["fwd_ms"] for r in rep["layers"]] == [15.0] * 3
    assert rep["device_ms"] == pytest.approx(3 * (30 / 8 + 15))


def test_profile_by_name_and_by_position(tmp_path):
    rows = [{"name": n, "fwd_ms": 5.0 * (i + 1), "bwd_ms": 1.0, "activation_bytes": 256} for i, n in
            enumerate(["0", "2", "4"])]
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"layers": rows}))
    model = emulate.wrap(mlp(), emulate.profile(str(path)))
    x, _ = batch()
    model(x)
    rep = emulate.report(model)
    assert [r["fwd_ms"] for r in rep["layers"]] == [5.0, 10.0, 15.0]
    by_position = [dict(r, name=f"layer{i}") for i, r in enumerate(rows)]
    model = emulate.wrap(mlp(), emulate.profile({"layers": list(reversed(by_position))}))
    model(x)
    assert [r["fwd_ms"] for r in emulate.report(model)["layers"]] == [15.0, 10.0, 5.0]
    with pytest.raises(ValueError, match="the profile has 2 layers"):
        emulate.wrap(mlp(), emulate.profile({"layers": rows[:2]}))


def test_roofline_counts_flops_from_the_real_shapes_at_the_emulated_batch():
    conv = torch.nn.Conv2d(8, 16, 3, padding=1)
    model = emulate.wrap(torch.nn.Sequential(conv), emulate.roofline("v100", batch=64))
    model(torch.randn(2, 8, 32, 32))
    fwd_flops = 2.0 * 64 * 16 * 32 * 32 * 8 * 9
    fwd_bytes = (2 * 8 * 32 * 32 + 2 * 16 * 32 * 32) * 32 * 4 + (16 * 8 * 9 + 16) * 4
    want = max(fwd_flops / 15.7e12, fwd_bytes / 900e9) * 1e3
    assert emulate.report(model)["layers"][0]["fwd_ms"] == pytest.approx(want, rel=1e-9)
    assert emulate.roofline("h100", batch=64).efficiency == 1.0


def test_a_micro_batch_gets_its_share_of_the_emulated_batch():
    """A call of fewer rows than the real batch (a pipeline's micro-batch) is
    that share of the emulated batch, for a named profile and a roofline;
    the weights are still read once per call."""
    from tern import emulate_models
    model = emulate.wrap(mlp(), emulate_models.source("resnet50@v100", batch=64, groups=3, real_batch=32))
    at = {n: emulate_models.grouped(emulate_models.profile_rows("resnet50@v100", n), 3) for n in (16, 64)}
    for rows, samples in ((8, 16), (32, 64)):
        model(batch(n=rows)[0])
        got = [r["fwd_ms"] for r in emulate.report(model)["layers"]]
        assert got == pytest.approx([r["fwd_ms"] for r in at[samples]], rel=1e-9)
    assert 0.2 < at[16][1]["fwd_ms"] / at[64][1]["fwd_ms"] < 0.5  # a quarter of the samples, not the whole batch
    linear = torch.nn.Linear(32, 64)
    model = emulate.wrap(torch.nn.Sequential(linear), emulate.roofline("v100", batch=64, real_batch=32))
    model(torch.randn(8, 32))  # 16 emulated samples
    fwd_bytes = (8 * 32 + 8 * 64) * 2 * 4 + (32 * 64 + 64) * 4
    want = max(2.0 * 16 * 32 * 64 / 15.7e12, fwd_bytes / 900e9) * 1e3
    assert emulate.report(model)["layers"][0]["fwd_ms"] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("bad, sentence", [
    (lambda: emulate.parse_ms("20"), "must look like FWD:BWD"),
    (lambda: emulate.parse_ms("20:40@0"), "at least 1"),
    (lambda: emulate.uniform(-1, 2), "must be >= 0"),
    (lambda: emulate.roofline("tpu"), "unknown device 'tpu'"),
    (lambda: emulate.roofline("v100", efficiency=0), "share of the peak"),
    (lambda: emulate.roofline("v100", real_batch=4), "needs an emulated batch"),
    (lambda: emulate.profile({"layers": [{"name": "x"}]}), "a device profile is"),
    (lambda: emulate.wrap(torch.nn.ReLU(), emulate.uniform(1, 1)), "no leaf module with parameters"),
    (lambda: emulate.report(torch.nn.Linear(2, 2)), "not emulated"),
])
def test_bad_input_is_a_sentence(bad, sentence):
    with pytest.raises(ValueError, match=sentence):
        bad()


def test_wrapping_twice_is_refused():
    model = emulate.wrap(mlp(), emulate.uniform(1, 1))
    with pytest.raises(ValueError, match="already emulated"):
        emulate.wrap(model, emulate.uniform(1, 1))
    copy.deepcopy(emulate.unwrap(model))  # an unwrapped module is an ordinary one again


# ---- the pipeline demo on emulated devices -------------------------------------------

def events(directory, stage, kind):
    with open(directory / f"events-stage{stage}.json") as f:
        return [e for e in json.load(f) if e["kind"] == kind]


def test_pipeline_on_emulated_devices_is_bitwise_the_reference(tmp_path):
    """3 stages on emulated devices (5:10 ms per layer, stage 1 twice as slow,
    an emulated batch of 64 on the wire for 32 real samples) train exactly the
    single-process reference's weights; device times and padding are visible."""
    from tern.pipeline import Config, run
    small = dict(layers=6, width=64, batch=32, iterations=3, lr=0.1, seed=3, schedule="flush", microbatches=4, k=1)
    run(Config(stages=1, **small), str(tmp_path / "ref"))
    rep = run(Config(stages=3, emulate_ms=[5.0, 10.0], emulate_batch=64, slow={"1": 2.0}, **small),
              str(tmp_path / "emu"))
    want, got = (torch.load(tmp_path / d / "final.pt") for d in ("ref", "emu"))
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert rep["weight_versions_ok"] and len(rep["overruns"]) == 3
    assert sum(rep["overruns"]) <= 3 * 2 * 4 * 3 // 4, rep["overruns"]  # tiny layers: the math fits in 5 ms
    fwd = {s: sorted(e["end"] - e["start"] for e in events(tmp_path / "emu", s, "fwd")) for s in range(3)}
    median = {s: d[len(d) // 2] for s, d in fwd.items()}
    assert 0.010 <= median[0] < 0.016 and 0.020 <= median[1] < 0.028, median  # 2 layers x 5 ms, stage 1 x2
    sent = {e["bytes"] for e in events(tmp_path / "emu", 0, "send_act")}
    assert sent == {16 * 64 * 4}, sent  # 8 real rows of a micro-batch, 16 on the wire


def test_pipeline_demo_runs_with_defaults_and_writes_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tern.pipeline.demo", "--stages", "2", "--iterations", "3",
                           "--emulate-ms", "2:4"], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "flush 2 stages: 3 batches" in done.stdout and "emulated device:" in done.stdout, done.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags, sentence", [
    (["--emulate-ms", "5"], "--emulate-ms: device times must look like FWD:BWD"),
    (["--emulate-ms", "5:-1"], "device times must be >= 0 ms"),
    (["--emulate-ms", "5:10", "--emulate-profile", "resnet50@v100"], "either --emulate-ms or --emulate-profile"),
    (["--emulate-profile", "resnet50@tpu"], "a named profile is MODEL@DEVICE"),
    (["--emulate-batch", "128"], "needs --emulate-ms or --emulate-profile"),
])
def test_pipeline_emulation_flags_are_checked(flags, sentence, capsys):
    from tern.pipeline import demo
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--stages", "3"] + flags)
    assert exit_info.value.code == 2
    assert sentence in capsys.readouterr().err


def test_named_profiles_have_the_real_models_parameters():
    from tern import emulate_models
    rows = emulate_models.profile_rows("resnet50@v100", batch=64)
    assert sum(r["params"] for r in rows) == 25557032  # torchvision's ResNet-50
    assert rows[0]["name"] == "conv1" and rows[-1]["name"] == "fc"
    # conv1: 2 * 64 samples * 64 x 112 x 112 outputs * 3 x 7 x 7 FLOPs at 15.7 TFLOP/s
    assert rows[0]["fwd_ms"] == pytest.approx(2 * 64 * 64 * 112 * 112 * 147 / 15.7e12 * 1e3, rel=1e-6)
    spread = emulate_models.grouped(rows, 6)
    assert [r["name"] for r in spread] == [f"layer{g}" for g in range(6)]
    assert sum(r["fwd_ms"] for r in spread) == pytest.approx(sum(r["fwd_ms"] for r in rows))
    with pytest.raises(ValueError, match="cannot spread a profile of 107 layers over 200"):
        emulate_models.grouped(rows, 200)
