"""--rebalance under --schedule async (PipeDream 1F1B, no flush): the same
policy as under flush (rebalance.py's Rebalancer, the planner's model, the
same log), decided at the mini-batch boundaries of the steady state.

An asynchronous pipeline has no point where every stage stands still, so
the boundary cannot be a collective: a stage that waited there for stage 0
would idle for the micro-batches stage 0 is behind it.  Instead:

- each stage, after its last backward of batch `it`, sends its row (what
  its forwards and backwards of that batch took, and its outgoing link as
  probed once at start) to stage 0 on a connection of its own
  (CONTROL_LEVEL, a level the async schedule uses for nothing else), from
  the link's sender thread: it does not wait;
- stage 0 reaches its own boundary of batch `it` last (gradients flow
  towards it), receives the rows (already there), asks the Rebalancer, and
  sends the decision (a move, or none) to every stage;
- stage s receives decision `it` at its boundary of batch `it + 1`, which
  comes after stage 0's boundary of batch `it` (it only waits if it runs
  ahead of stage 0 by more than a batch);
- a move decided at batch `it` is a live migration at batch it + LOOKAHEAD,
  far enough ahead that every stage learns it before the first point of
  the async protocol that involves it (migration_async.py): stage s has run
  forwards up to (it + 2) m - 1 + (N - s) at its boundary of batch it + 1,
  and FROM's message goes before forward k = (it + LOOKAHEAD) m.

Stage 0 decides at its boundaries 0 .. iterations-3 (a decision at the last
boundaries could not complete in the run anyway), so every stage sends
rows for those batches and receives those decisions, in order, and both
ends of each connection make the same calls.
"""
import statistics

import numpy as np
import torch

from .links import CONTROL_LEVEL, Link
from .rebalance import SETTLE
from .replan import FIELDS

NONE = [-1.0, -1.0, -1.0, 0.0]  # a decision that moves nothing


def lookahead(stages, m):
    """Batches between a decision and its migration (module docstring)."""
    return 2 + -(-stages // m)


class AsyncRebalance:
    def __init__(self, runtime, link_row):
        """link_row: this stage's outgoing link as (Gbit/s, latency us), probed at start."""
        self.rt, self.link_row = runtime, link_row
        self.m = runtime.cfg.microbatches
        self.ahead = lookahead(runtime.p, self.m)
        self.last = runtime.cfg.iterations - 3  # the last batch decided at (module docstring)
        log = runtime.log
        if runtime.rank == 0:
            self.links = {s: Link(runtime.comm, s, log, "rebalance_decision", "rebalance_row", level=CONTROL_LEVEL)
                          for s in range(1, runtime.p)}
        else:
            self.links = {0: Link(runtime.comm, 0, log, "rebalance_row", "rebalance_decision", level=CONTROL_LEVEL)}

    def boundary(self, it):
        """After this stage's last backward of batch `it`."""
        if it > self.last + 1:
            return
        if self.rt.rank != 0:
            if it <= self.last:
                self.links[0].send(torch.tensor([self.row(it)[f] for f in FIELDS]), it, -1)
            if it >= 1:
                self._apply(self.links[0].recv((len(NONE),), it, -1).tolist())
            return
        if it > self.last:
            return
        rows = [self.row(it)] + [dict(zip(FIELDS, self.links[s].recv((len(FIELDS),), it, -1).tolist()))
                                 for s in range(1, self.rt.p)]
        move = self.rt.rebalancer.decide(it, self.rt.partitions[it], rows, self.m, 1, self._idle(it))
        decision = [float(it + self.ahead), float(move[0]), float(move[1]), 1.0] if move else NONE
        for link in self.links.values():
            link.send(torch.tensor(decision), it, -1)
        self._apply(decision)

    def row(self, it):
        """This stage's measurement of batch `it`, in the fields the planner's
        model reads (per sample, no fixed part: the ops are of one size)."""
        size = self.rt.cfg.batch // self.m
        row = dict.fromkeys(FIELDS, 0.0)
        for kind in ("fwd", "bwd"):
            ops = [e["end"] - e["start"] for e in self.rt.log.of(it, kind)]
            row[kind + "_ms_per_sample"] = statistics.median(ops) * 1e3 / size if ops else 0.0
        row["link_gbps"], row["link_latency_us"] = self.link_row
        return row

    def close(self):
        for link in self.links.values():
            link.close()

    def _idle(self, it):
        """No migration in progress or settling, and one decided now completes in the run."""
        for k, src, dst, _ in self.rt.migrations:
            done = (k * self.m + 1 + self.rt.p - max(src, dst)) // self.m  # AsyncMigration.final's batch
            if done + SETTLE - 1 > it:
                return False
        return it + self.ahead + 2 < self.rt.cfg.iterations

    def _apply(self, decision):
        it, src, dst, n = (int(v) for v in np.round(decision))
        if it >= 0:
            self.rt.add_migration([it, src, dst, n])
