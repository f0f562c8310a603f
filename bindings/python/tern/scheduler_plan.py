"""The plan of tern.torch.PriorityScheduler: which level each parameter's
allreduce gets, and in which order each level's allreduces are issued.

    plan = scheduler_plan.make(module, sample_batch, policy="tac", bandwidth_gbps=1.0)
    plan["level"]      # {param name: 0..LEVELS - 1}, 0 most urgent
    plan["backward"]   # param names in the order their gradients become ready

tic / tac: tern.priority on the graph tern.planner.trace_graph measures
(one forward and backward of `module` on `sample_batch`).  layer: plain
layer order, the parameters of the first module the forward runs most
urgent (the same mapping of numbers onto the levels as tern.priority's).
fifo: no priorities, every parameter at the default level in the order the
gradients arrive (what per-parameter overlap alone buys: a baseline).
Tracing changes nothing the training sees: gradients, buffers (batch-norm
statistics) and the random generator are put back as they were.
"""
import json

import torch

from . import planner, priority
from ._tern import PRIORITY_DEFAULT, PRIORITY_LEVELS

POLICIES = ("tic", "tac", "layer", "fifo")
FIFO_LEVEL = PRIORITY_DEFAULT
LEVELS = PRIORITY_LEVELS


def check_policy(policy):
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}.")


def levels_of(numbers):
    """{name: number} -> {name: level}: distinct numbers spread evenly over
    levels 0..LEVELS - 1, the smallest at 0, as tern.priority maps TicTac's
    (libtern_planner's levelsOf, through ternPlanLevels)."""
    names = list(numbers)
    levels = json.loads(planner._call("ternPlanLevels", json.dumps([numbers[n] for n in names]).encode()))
    return dict(zip(names, levels))


def _traced(module, sample_batch, bandwidth_gbps):
    """trace_graph's graph, leaving no trace of the run in the module."""
    buffers = [b.detach().clone() for b in module.buffers()]
    rng = torch.get_rng_state()
    grads = [p.grad for p in module.parameters()]
    try:
        return planner.trace_graph(module, sample_batch, bandwidth_gbps=bandwidth_gbps)
    finally:
        with torch.no_grad():
            for b, saved in zip(module.buffers(), buffers):
                b.copy_(saved)
        torch.set_rng_state(rng)
        for p, g in zip(module.parameters(), grads):
            p.grad = g


def forward_order(graph):
    """Parameter names grouped by module, modules in the order the forward ran them."""
    groups = []
    for op in graph["ops"]:
        if op["kind"] == "compute" and op["id"].startswith("fwd:"):
            names = [d[len("recv:"):] for d in op["deps"] if d.startswith("recv:")]
            if names:
                groups.append(names)
    return groups


def make(module, sample_batch, policy, bandwidth_gbps):
    """{"policy", "level": {name: level}, "backward": [name, ...]} on this rank."""
    check_policy(policy)
    graph = _traced(module, sample_batch, bandwidth_gbps)
    groups = forward_order(graph)
    if policy == "fifo":
        level = {name: FIFO_LEVEL for names in groups for name in names}
    elif policy == "layer":
        level = levels_of({name: i for i, names in enumerate(groups) for name in names})
    else:
        level = priority.assign(graph, policy)["priority"]
    backward = [name for names in reversed(groups) for name in reversed(names)]
    return {"policy": policy, "level": level, "backward": backward}
