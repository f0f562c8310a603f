"""The kFkB pipeline planner (docs/DESIGN.md, "kFkB pipeline planner"), and inputs measured from torch models.

    import tern.planner as planner
    plan = planner.schedule("model.json")              # or a dict; network_now=, microbatches=
    plan["best"]      # {"microbatches", "microbatch_size", "k", "iteration_ms"}
    planner.gantt("model.json", "schedule.svg")        # or .png (matplotlib)

    model_json = planner.profile(torch_model, sample_batch, stages=[2, 3, 2], path="model.json")
    graph_json = planner.trace_graph(torch_model, batch, path="graph.json")   # for tern.priority

The decisions are libtern_planner.so's (the same code as tools/tern-plan),
reached through ctypes: its ABI is JSON text in and out (src/planner/
tern_plan.h), so this wrapper needs no compile step and shares no C++ type
with the library; torch is imported only by profile() and trace_graph().
An unusable input raises ValueError with the library's sentence naming the
field; other failures raise RuntimeError.
"""
import ctypes
import ctypes.util
import json
import os
import statistics
import time

__all__ = ["schedule", "trace", "gantt", "profile", "trace_graph"]

_LIB = None
_OUT = ctypes.POINTER(ctypes.POINTER(ctypes.c_char))
_SIGNATURES = {  # tern_plan.h; each function also takes the result's char** last
    "ternPlanSchedule": [ctypes.c_char_p, ctypes.c_double, ctypes.c_longlong, _OUT],
    "ternPlanGantt": [ctypes.c_char_p, ctypes.c_double, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int, _OUT],
    "ternPlanTraceSvg": [ctypes.c_char_p, _OUT],
    "ternPlanKfkbOrder": [ctypes.c_longlong] * 4 + [_OUT],
    "ternPlanLevels": [ctypes.c_char_p, _OUT],
    "ternPlanPriorities": [ctypes.c_char_p, ctypes.c_char_p, _OUT],
    "ternPlanEfficiency": [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_ulonglong, _OUT],
}


def _library():
    """libtern_planner.so: $TERN_PLANNER_LIB, else beside the package in the
    build tree (build/python/tern -> build/) or in an install
    (<prefix>/lib/python3.X/dist-packages/tern -> <prefix>/lib), else the
    loader's search path."""
    global _LIB
    if _LIB is not None:
        return _LIB
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("TERN_PLANNER_LIB"),
                  os.path.join(here, "..", "..", "libtern_planner.so"),
                  os.path.join(here, "..", "..", "..", "libtern_planner.so"),
                  ctypes.util.find_library("tern_planner")]
    for path in filter(None, candidates):
        if os.path.sep in path and not os.path.exists(path):
            continue
        lib = ctypes.CDLL(path)
        for name, argtypes in _SIGNATURES.items():
            getattr(lib, name).argtypes = argtypes
        lib.ternPlanFree.argtypes = [ctypes.POINTER(ctypes.c_char)]
        _LIB = lib
        return lib
    raise RuntimeError("libtern_planner.so was not found (build tern, install it, or set TERN_PLANNER_LIB)")


def _call(name, *args):
    """One C ABI function; returns its text, raising on failure."""
    lib = _library()
    out = ctypes.POINTER(ctypes.c_char)()
    rc = getattr(lib, name)(*args, ctypes.byref(out))
    text = ctypes.string_at(out).decode() if out else "the planner returned nothing"
    lib.ternPlanFree(out)
    if rc == 2:
        raise ValueError(text)
    if rc != 0:
        raise RuntimeError(text)
    return text


def _json_text(doc):
    """A dict (written as JSON) or the path of a JSON file, as bytes."""
    if isinstance(doc, dict):
        return json.dumps(doc).encode()
    with open(doc, "rb") as f:
        return f.read()


def _bandwidth(network_now):
    if network_now is None:
        return 0.0
    if not network_now > 0:
        raise ValueError(f"network_now must be a positive bandwidth in Gbit/s, not {network_now!r}.")
    return float(network_now)


def schedule(model, network_now=None, microbatches=None):
    """docs/DESIGN.md's plan of `model` (a dict or model.json's path): {"best",
    "candidates"}.  network_now: every link's bandwidth in Gbit/s (re-planning
    under measured contention); microbatches: only that split."""
    return json.loads(_call("ternPlanSchedule", _json_text(model), _bandwidth(network_now), microbatches or 0))


def trace(model, network_now=None, microbatches=None, k=None):
    """Every event of the chosen schedule (or of microbatches and k):
    {"title", "stages", "iteration_ms", "events": [{"kind", "stage", "micro", "start_ms", "end_ms"}]}."""
    return json.loads(_call("ternPlanGantt", _json_text(model), _bandwidth(network_now), microbatches or 0, k or 0, 0))


def gantt(model, path, network_now=None, microbatches=None, k=None):
    """Draws the chosen schedule (or that of microbatches and k) to `path`:
    the library's SVG chart, or for .png that chart painted by matplotlib."""
    from . import _charts
    _charts.check_path(path)
    _charts.save(_call("ternPlanGantt", _json_text(model), _bandwidth(network_now), microbatches or 0, k or 0, 1),
                 path)


# ---- inputs measured from torch models ----------------------------------------------


def _median_ms(fn, repeats):
    fn()  # warm-up: allocator, lazy initialisation
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _stage_modules(model, stages):
    """stages: modules run one after another, or layer counts of an nn.Sequential."""
    import torch
    if all(isinstance(s, torch.nn.Module) for s in stages):
        return list(stages)
    if not all(isinstance(s, int) and s > 0 for s in stages):
        raise ValueError("stages must be modules or positive layer counts.")
    if not isinstance(model, torch.nn.Sequential) or sum(stages) != len(model):
        raise ValueError(f"layer counts {stages} must add up to the length of an nn.Sequential model.")
    bounds = [sum(stages[:i]) for i in range(len(stages) + 1)]
    return [model[bounds[i]:bounds[i + 1]] for i in range(len(stages))]


def _nbytes(t):
    return t.numel() * t.element_size()


def _profile_stage(module, x, repeats):
    """(fwd ms, bwd ms, activation bytes, output bytes, static bytes, output) of one stage on batch x."""
    import torch
    params = {p.data_ptr() for p in module.parameters()}
    saved = []

    def pack(t):  # what autograd keeps for the backward: the activations (weights are static)
        if t.data_ptr() not in params:
            saved.append(_nbytes(t))
        return t

    def forward():
        return module(x.detach().requires_grad_(x.is_floating_point()))

    fwd_ms = _median_ms(forward, repeats)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = forward()
    grad = torch.ones_like(y)
    bwd_ms = _median_ms(lambda: forward().backward(grad), repeats) - fwd_ms
    static = 2 * sum(_nbytes(p) for p in module.parameters()) + sum(_nbytes(b) for b in module.buffers())
    return fwd_ms, max(bwd_ms, 1e-6), sum(saved), _nbytes(y), static, y.detach()


def profile(model, sample_batch, stages, batch_size=None, memory_bytes=None, network=None, path=None, repeats=5):
    """Measures each pipeline stage of a torch model on this machine and
    returns (and writes to `path`) model.json for schedule().

    stages: the stage modules in order, or layer counts of an nn.Sequential
    `model` (e.g. [2, 3, 2]).  Per sample: forward and backward time (median
    of `repeats`), activation bytes (what autograd saves for the backward,
    weights excluded) and output bytes (what crosses to the next stage).
    static_bytes: parameters, their gradients and buffers.  batch_size: the
    training batch (default: sample_batch's).  memory_bytes: one number or a
    list per stage (default: this machine's RAM).  network: docs/DESIGN.md's
    object or list (default 10 Gbit/s, 50 us)."""
    import torch
    modules = _stage_modules(model, stages)
    samples = sample_batch.shape[0]
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    memory = memory_bytes if isinstance(memory_bytes, (list, tuple)) else [memory_bytes] * len(modules)
    out = []
    x = sample_batch
    with torch.enable_grad():
        for module, mem in zip(modules, memory):
            fwd, bwd, act, outb, static, x = _profile_stage(module, x, repeats)
            out.append({"fwd_ms_per_sample": max(fwd, 1e-6) / samples, "bwd_ms_per_sample": bwd / samples,
                        "activation_bytes_per_sample": max(act, 1) / samples,
                        "output_bytes_per_sample": max(outb, 1) / samples,
                        "static_bytes": max(static, 1), "memory_bytes": mem})
    doc = {"batch_size": batch_size or samples, "stages": out,
           "network": network or {"bandwidth_gbps": 10.0, "latency_us": 50.0}}
    _write(doc, path)
    return doc


def _write(doc, path):
    if path:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)


def _module_ops(model, batch, repeats):
    """Runs `model` on `batch`; per leaf module that ran: name, forward ms
    (median of `repeats`), its output's autograd node and its inputs' nodes."""
    import torch
    leaves = [(n, m) for n, m in model.named_modules() if not list(m.children())]
    ops, clock = {}, {}

    def pre(name):
        def hook(module, inputs):
            clock[name] = time.perf_counter()
            ops.setdefault(name, {"ms": [], "inputs": [], "output": None})["inputs"] = [
                t.grad_fn for t in inputs if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        return hook

    def post(name):
        def hook(module, inputs, output):
            ops[name]["ms"].append((time.perf_counter() - clock[name]) * 1e3)
            ops[name]["output"] = output.grad_fn if isinstance(output, torch.Tensor) else None
        return hook

    handles = [m.register_forward_pre_hook(pre(n)) for n, m in leaves] + \
              [m.register_forward_hook(post(n)) for n, m in leaves]
    try:
        for _ in range(repeats):
            with torch.enable_grad():
                loss = model(batch).sum()
    finally:
        for h in handles:
            h.remove()
    return ops, loss


def _upstream(node, producers, seen):
    """The modules whose outputs feed autograd node `node`, through functional glue."""
    found = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        if n in producers:
            found.add(producers[n])
            continue
        stack.extend(f for f, _ in n.next_functions)
    return found


def trace_graph(model, batch, path=None, bandwidth_gbps=10.0, repeats=3):
    """graph.json for tern.priority from one training step of a torch model.

    One compute op per leaf module for its forward (measured, median of
    `repeats`) and one for its backward (the step's measured backward time
    shared in proportion to the forwards); module dependencies follow the
    autograd graph, through functional glue (flatten, residual adds).  Each
    parameter is a recv before its module's forward (the next iteration's
    weights) and a send after its module's backward (its gradient), timed at
    `bandwidth_gbps`."""
    ops, loss = _module_ops(model, batch, repeats)
    producers = {v["output"]: n for n, v in ops.items() if v["output"] is not None}
    t0 = time.perf_counter()
    loss.backward()
    backward_ms = (time.perf_counter() - t0) * 1e3
    forward_ms = {n: statistics.median(v["ms"]) for n, v in ops.items()}
    total_fwd = sum(forward_ms.values()) or 1.0
    graph = []
    owners = dict(model.named_modules())
    users = {n: [] for n in ops}
    for name, op in ops.items():
        upstream = set()
        for node in op["inputs"]:
            upstream |= _upstream(node, producers, set())
        upstream.discard(name)
        for u in upstream:
            users[u].append(name)
        params = [(f"{name}.{p}" if name else p, t) for p, t in owners[name].named_parameters(recurse=False)]
        for pname, t in params:
            graph.append({"id": "recv:" + pname, "kind": "recv", "deps": [], "param": pname,
                          "bytes": _nbytes(t), "time_ms": _nbytes(t) * 8e-6 / bandwidth_gbps})
        graph.append({"id": "fwd:" + name, "kind": "compute", "time_ms": forward_ms[name],
                      "deps": sorted("fwd:" + u for u in upstream) + ["recv:" + p for p, _ in params]})
        op["params"] = params
    for name, op in ops.items():
        graph.append({"id": "bwd:" + name, "kind": "compute",
                      "time_ms": backward_ms * forward_ms[name] / total_fwd,
                      "deps": ["fwd:" + name] + sorted("bwd:" + u for u in users[name])})
        for pname, t in op["params"]:
            graph.append({"id": "send:" + pname, "kind": "send", "deps": ["bwd:" + name], "param": pname,
                          "bytes": _nbytes(t), "time_ms": _nbytes(t) * 8e-6 / bandwidth_gbps})
    doc = {"ops": graph}
    _write(doc, path)
    return doc
