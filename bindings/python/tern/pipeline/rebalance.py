"""--rebalance (flush): at each batch boundary the coordinator (stage 0)
asks the planner's cost model whether moving one layer from a stage to a
neighbour would shorten the iteration, and starts that live migration.

A layer's cost at a stage is the stage's measured compute over its layers
(`Cost`, refitted every batch): a slowed device (--slow-stage, a co-located
job) stays slow per layer, so a candidate partition's model is the measured
one with each stage's compute scaled by new/old layer counts; the planner
predicts both iteration times for the (m, K) the pipeline runs.  A move is
made when the predicted gain exceeds `threshold` at two boundaries in a row
(one batch's measurement on a loaded host can be far off), and only when no
migration is in progress.  Every boundary's evaluation is logged with the
predicted times and gain, moves and holds alike.
"""
COMPUTE = ("fwd_fixed_ms", "fwd_ms_per_sample", "bwd_fixed_ms", "bwd_ms_per_sample")


def scaled(rows, partition, new):
    """The stages' measurements as if each ran `new` layers instead of `partition`'s."""
    out = []
    for row, old, n in zip(rows, partition, new):
        row = dict(row)
        for field in COMPUTE:
            row[field] = row[field] * n / old
        out.append(row)
    return out


def moves(partition):
    """(from, to, new partition) for every one-layer move between neighbours."""
    for src, n in enumerate(partition):
        for dst in (src - 1, src + 1):
            if n > 1 and 0 <= dst < len(partition):
                new = list(partition)
                new[src] -= 1
                new[dst] += 1
                yield src, dst, new


class Rebalancer:
    def __init__(self, replanner, threshold):
        self.replanner, self.threshold = replanner, threshold
        self.log = []
        self._last = None  # the move the previous boundary found worth making

    def decide(self, iteration, partition, rows, m, k, idle):
        """(from, to) to move one layer after `iteration`, or None; `idle`:
        no migration is in progress (a stage takes part in one at a time)."""
        old_ms = self.replanner.predict(partition, rows, m, k)
        best = min(((self.replanner.predict(new, scaled(rows, partition, new), m, k), src, dst, new)
                    for src, dst, new in moves(partition)), default=None)
        entry = {"iteration": iteration, "partition": list(partition), "predicted_old_ms": old_ms,
                 "stage_compute_ms": [round(sum(r[f] for f in COMPUTE), 4) for r in rows]}
        move = None
        if best is not None:
            new_ms, src, dst, new = best
            gain = old_ms / new_ms
            entry.update({"best_move": [src, dst], "new_partition": new, "predicted_new_ms": new_ms,
                          "predicted_gain": gain})
            worth = gain > 1 + self.threshold
            if worth and idle and self._last == (src, dst):
                move = (src, dst)
            self._last = (src, dst) if worth else None
        entry["action"] = "move" if move else "hold"
        self.log.append(entry)
        if move:
            self._last = None
        return move
