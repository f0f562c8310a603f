"""Parameter priorities from the computation graph (docs/DESIGN.md,
"Priorities from the computation graph": TicTac, seed 004).

    import tern.priority
    p = tern.priority.assign("graph.json", policy="tac")   # or a dict; policy "tic" | "tac"
    p["order"]        # parameters, most urgent first
    p["priority"]     # {param: level 0..7}, for ternSetPriority / the torch scheduler
    tern.priority.efficiency("graph.json")   # TicTac's E for that order and for random orders

graph.json is what tern.planner.trace_graph(model, batch) writes.  The
decisions are libtern_planner.so's, the same code as `tern-plan priorities`.
"""
import json

from .planner import _call, _json_text

__all__ = ["assign", "efficiency"]


def assign(graph, policy="tac"):
    """{"policy", "order", "priority"} for `graph` (a dict or graph.json's path)."""
    return json.loads(_call("ternPlanPriorities", _json_text(graph), policy.encode()))


def efficiency(graph, policy="tac", samples=32, seed=1):
    """What the order buys: {"policy", "efficiency", "makespan_ms", "lower_ms",
    "upper_ms", "random_efficiency"}, E = (U - makespan) / (U - L) for the
    policy's order and its mean over `samples` random orders (seeded)."""
    return json.loads(_call("ternPlanEfficiency", _json_text(graph), policy.encode(), samples, seed))
