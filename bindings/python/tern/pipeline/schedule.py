"""The order of a stage's operations (docs/DESIGN.md, "kFkB pipeline planner").

Exactly the planner's simulated order, taken from it (src/planner/kfkb.h,
through libtern_planner's ternPlanKfkbOrder), so the measured schedule is the
predicted one: stage s of p runs min(groups, p - s) groups of K forwards to
fill the pipeline, then one group of backwards and one of forwards in turn
while forwards remain, then the remaining backward groups.  K = 1 is 1F1B,
K = m is GPipe.  Forwards and backwards each run in ascending micro-batch
order, which also fixes the order gradients are accumulated in (the reason a
flushing run can equal single-process training bitwise).

PipeDream's asynchronous 1F1B is the same order with K = 1 over every
micro-batch of the run, without a flush between batches.
"""
import json

from .. import planner

FORWARD, BACKWARD = "F", "B"  # the letters ternPlanKfkbOrder writes


def kfkb_order(m, k, stages, stage):
    """[(kind, micro-batch)] of stage `stage` for m micro-batches in groups of
    k; ValueError naming the bad argument."""
    text = planner._call("ternPlanKfkbOrder", int(m), int(k), int(stages), int(stage))
    return [(kind, micro) for kind, micro in json.loads(text)]
