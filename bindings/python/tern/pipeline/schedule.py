"""The order of a stage's operations (DESIGN.md, kFkB pipeline planner).

Exactly the planner's simulated order (src/planner/schedule.cc, Cursor), so
the measured schedule is the predicted one: stage s of p runs min(groups,
p - s) groups of K forwards to fill the pipeline, then one group of
backwards and one of forwards in turn while forwards remain, then the
remaining backward groups.  K = 1 is 1F1B, K = m is GPipe.  Forwards and
backwards each run in ascending micro-batch order, which also fixes the
order gradients are accumulated in (the reason a flushing run can equal
single-process training bitwise).

PipeDream's asynchronous 1F1B is the same order with K = 1 over every
micro-batch of the run, without a flush between batches.
"""

FORWARD, BACKWARD = "F", "B"


def kfkb_order(m, k, stages, stage):
    """[(kind, micro-batch)] of stage `stage` for m micro-batches in groups of k."""
    if not (1 <= k <= m):
        raise ValueError(f"K must be between 1 and the micro-batch count {m}, not {k}.")
    if not (0 <= stage < stages):
        raise ValueError(f"stage {stage} is not one of 0..{stages - 1}.")
    groups = [list(range(g, min(g + k, m))) for g in range(0, m, k)]
    warmup = min(len(groups), stages - stage)
    order, next_f = [], 0
    for _ in range(warmup):
        order += [(FORWARD, i) for i in groups[next_f]]
        next_f += 1
    for g in groups:
        order += [(BACKWARD, i) for i in g]
        if next_f < len(groups):
            order += [(FORWARD, i) for i in groups[next_f]]
            next_f += 1
    return order
