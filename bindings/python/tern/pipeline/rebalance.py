"""--rebalance (flush): at each batch boundary the coordinator (stage 0)
asks the planner's cost model whether moving one layer from a stage to a
neighbour would shorten the iteration, and starts that live migration.

A layer's cost at a stage is the stage's measured compute over its layers
(`Cost`, refitted every batch): a slowed device (--slow-stage, a co-located
job) stays slow per layer, so a candidate partition's model is the measured
one with each stage's compute scaled by new/old layer counts; the planner
predicts both iteration times for the (m, K) the pipeline runs.  A move is
made when its predicted gain exceeds `threshold` at two boundaries in a row
(one batch's measurement on a loaded host can be far off; the best move may
flip between a slowed stage's two neighbours, so it is enough that this
boundary's best was worth making at the previous one too), and only when no
migration is in progress.  Every boundary's evaluation is logged with the
predicted times and gain, moves and holds alike.

Moving back: the policy remembers the moves it made.  Undoing the last one
is preferred over any other move as soon as it is not predicted to lose
more than the threshold (its predicted gain above 1 / (1 + threshold)):
while the stage it relieved is still slow, undoing is predicted to lose
clearly (the layer would go back onto the slow device); once that stage
recovers, undoing costs nothing and restores the partition the run started
with, chosen for healthy devices, rather than wandering to another one that
the model finds marginally better.  It is logged as "move back" with its
predicted gain.  A stage's compute history starts afresh when its layer
count changes (runtime.py), so the measurement after a move describes the
new layers, and a stage that recovers shows it within a few batches (the
per-sample part of `Cost` is the median of the last few batches).

Flap damping: every move back doubles the number of boundaries in a row
at which a move must be found worth making before it is made (2, then 4,
8, ...).  A run whose stage recovered has shown that the partition it
started with was right; on a host shared by more stages than cores, a few
batches' noise can exceed the threshold for two boundaries running, and
without damping the policy would move a layer away again (seen in CI: move,
move back, move).  A stage that really turns slow again keeps the gain for
as many boundaries as it stays slow, so it is still relieved, later.

Settling: for SETTLE boundaries after the partition changes, nothing is
decided and no streak counts.  A stage whose layer count changed starts its
compute history afresh, so its first boundaries rest on one or two
batches, and those batches carry the migration's own completion.  In CI,
a slowed stage that read 29 and 19 ms in the two batches after its move
(against 67-262 ms before and after) got its layer moved back while it was
still slow.
"""
COMPUTE = ("fwd_fixed_ms", "fwd_ms_per_sample", "bwd_fixed_ms", "bwd_ms_per_sample")
SETTLE = 3  # boundaries after a partition change at which nothing is decided (docstring)


def op_ms(row, size):
    """A stage's forward + backward of one micro-batch of `size` samples, in its model."""
    return row["fwd_fixed_ms"] + row["bwd_fixed_ms"] + size * (row["fwd_ms_per_sample"] + row["bwd_ms_per_sample"])


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
        self.made = []       # the moves made, in order (the last one is undone first)
        self.persist = 2     # boundaries in a row a move must be worth making at (doubles per move back)
        self._streak = {}    # move -> boundaries in a row, up to the previous one, it was worth making at
        self._partition, self._since = None, SETTLE  # the last partition seen, boundaries since it changed

    def decide(self, iteration, partition, rows, m, k, idle):
        """(from, to) to move one layer after `iteration`, or None; `idle`:
        no migration is in progress (a stage takes part in one at a time)."""
        changed = self._partition is not None and list(partition) != self._partition
        self._partition, self._since = list(partition), 0 if changed else self._since + 1
        settling = self._since < SETTLE
        old_ms = self.replanner.predict(partition, rows, m, k)
        options = [(self.replanner.predict(new, scaled(rows, partition, new), m, k), src, dst, new)
                   for src, dst, new in moves(partition)]
        best = min(options, default=None)
        back = next((o for o in options if self.made and (o[2], o[1]) == self.made[-1]), None)
        if back is not None and old_ms / back[0] > 1 / (1 + self.threshold):
            best = back  # the relieved stage recovered: undo the last move rather than make a new one
        # Worth making: a gain above the threshold (undoing: no loss beyond it).
        worth = {o[1:3] for o in options
                 if old_ms / o[0] > (1 / (1 + self.threshold) if o is back else 1 + self.threshold)}
        entry = {"iteration": iteration, "partition": list(partition), "predicted_old_ms": old_ms,
                 # each stage's forward + backward of one micro-batch, as the model has it
                 "stage_op_ms": [round(op_ms(r, self.replanner.cfg.batch // m), 4) for r in rows]}
        move = None
        if best is not None:
            new_ms, src, dst, new = best
            gain = old_ms / new_ms
            entry.update({"best_move": [src, dst], "new_partition": new, "predicted_new_ms": new_ms,
                          "predicted_gain": gain, "back": best is back})
            # Made when the boundaries before found it worth making too (the best
            # move itself may flip between a slowed stage's two neighbours).
            if (src, dst) in worth and idle and not settling and self._streak.get((src, dst), 0) + 1 >= self.persist:
                move = (src, dst)
        self._streak = {} if move or settling else {mv: self._streak.get(mv, 0) + 1 for mv in worth}
        entry["persist"], entry["settling"] = self.persist, settling
        entry["action"] = ("move back" if best is back else "move") if move else "hold"
        self.log.append(entry)
        if move:
            if best is back:
                self.made.pop()
                self.persist *= 2  # flap damping (module docstring)
            else:
                self.made.append(move)
        return move
