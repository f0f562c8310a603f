"""Live layer migration between adjacent stages (docs/DESIGN.md,
"The migration protocol"), under the
synchronous flush schedule.

A migration (k, FROM, TO, n) moves n layers from the outgoing stage FROM to
its neighbour TO: FROM's last n layers when TO = FROM + 1, its first n when
TO = FROM - 1.  The protocol's steps, and where each lands in a flushing
batch (batch = iteration):

1. Message.  FROM sends [k, n, first layer] over a connection of its own
   (MIGRATION_LEVEL): before its next forward of batch k if it stands before
   TO, before its next backward of batch k if after.  TO receives it at the
   same point of its own batch k.
2. Preparation.  Both open a weight stream for the moving layers
   (STREAM_LEVEL, its own flow), between batches: FROM at its first push,
   TO at its first install (under async TO opens at the message, on its
   background thread, background.py); TO instantiates the layers at once,
   uninitialised (the first install fills them).  The
   protocol's receiver offsets (backward k-N+t+1 / k-N+t+2) count batches in
   flight in an asynchronous pipeline; a flushing batch has none in flight at
   its boundary, so they fall at or before batch k: the earliest point TO can
   act on the message is receiving it.  FROM splits its model (kept / moving)
   before the forward of batch S, S = k+1 (before TO) or k+2 (after TO).
3. Migration.  FROM pushes the moving layers' weights before each of its
   forwards from the split on, k+1 .. S (right after the optimizer step
   that made them; version = its optimizer steps so far);
   TO installs them after each of its backwards k..S-1 (after that batch's
   optimizer step, waiting for version b+1, the one FROM's next forward
   uses).  Plain SGD has no optimizer state beyond the step count, which is
   the version; the installed weights are the very bits FROM would compute
   with, so the run stays bitwise equal to one without migration.
   Under flush every micro-batch of a batch uses that batch's weights, so
   "forwards on the new partition, backwards on the old one" never mixes
   inside a batch: batches < S run wholly on the old partition, >= S on the
   new one.
4. Completion (once every weight has moved: right after the last push and
   install, after batch S-1's optimizer step, before the boundary).  FROM
   frees the moved layers, TO adds the installed ones, the weight stream
   closes, and the pair's pipeline connection is replaced by a new one (the
   new neighbour connection); every stage switches its partition at batch S.

Where the time goes (perf/pipeline/migration_stall.py, docs/PIPELINE.md):
nothing of the migration waits on the compute thread inside a batch except
sending (queued) and receiving the 12-byte message and allocating the
layers; the stream's open handshake, the pushes, the install's wait and the
completion fall between batches (a thread left waiting in the handshake
through batch k cost that batch 10-100% over tcp on 2 cores).

Disjoint adjacent pairs may migrate at once; a stage takes part in one
migration at a time (checked by `plan_partitions`).
"""
import os
import time

from .background import Background
from .links import Link, at_level
from .model import make_layers

MIGRATION_LEVEL = 1  # the migration message: control, ahead of the activations (level 2)
STREAM_LEVEL = 6     # the moving layers' weights: bulk, behind activations and boundary control


def switch_batch(k, src, dst):
    """The first batch on the new partition (protocol step 2's k+1 / k+2)."""
    return k + 1 if src < dst else k + 2


def plan_partitions(initial, migrations, iterations, switch_batch=switch_batch):
    """The partition of every batch for migrations [[k, from, to, n], ...]
    (a batch's partition: that of its first forward); ValueError with a
    sentence when one cannot run as asked."""
    busy = {}  # stage -> the batch its current migration completes
    partition, out = list(initial), []
    pending = sorted(migrations, key=lambda m: m[0])
    stages = len(initial)
    for k, src, dst, n in pending:
        if not (0 <= src < stages and 0 <= dst < stages and abs(src - dst) == 1):
            raise ValueError(f"--migrate {k}:{src}:{dst}:{n}: FROM and TO must be adjacent stages of 0..{stages - 1}.")
        if n < 1:
            raise ValueError(f"--migrate {k}:{src}:{dst}:{n}: NLAYERS must be at least 1.")
        if not 0 <= k or switch_batch(k, src, dst) >= iterations:
            raise ValueError(f"--migrate {k}:{src}:{dst}:{n}: it completes at batch {switch_batch(k, src, dst)}, "
                             f"after the last of --iterations {iterations}.")
        for s in (src, dst):
            if busy.get(s, -1) > k:
                raise ValueError(f"--migrate {k}:{src}:{dst}:{n}: stage {s} is still in another migration until "
                                 f"batch {busy[s]} (pairs migrating at once must be disjoint).")
            busy[s] = switch_batch(k, src, dst)
    for it in range(iterations):
        for k, src, dst, n in pending:
            if switch_batch(k, src, dst) == it:
                if partition[src] - n < 1:
                    raise ValueError(f"--migrate {k}:{src}:{dst}:{n}: stage {src} has {partition[src]} layer(s) "
                                     f"then and must keep at least one.")
                partition[src] -= n
                partition[dst] += n
        out.append(list(partition))
    return out


class Migration:
    """One migration as seen by one of its two stages."""

    def __init__(self, k, src, dst, n, rank):
        self.k, self.src, self.dst, self.n = k, src, dst, n
        self.outgoing = rank == src
        self.peer = dst if self.outgoing else src
        self.switch = switch_batch(k, src, dst)
        self.msg_on_forward = src < dst  # step 1: before the forward (FROM before TO) or the backward
        self.layers, self.indices, self.link, self.stream, self.arrays = None, [], None, None, None
        self.installed = None  # TO: the last version installed (async keeps its own updates on top)

    def record(self):
        return {"from": self.src, "to": self.dst, "layers": self.indices,
                "message_iter": self.k, "done_iter": self.switch}


class Steps:
    """The protocol's steps on one stage, whatever the schedule: the subclass
    calls them at the schedule's points.  `at` is (iteration, micro) for the
    event log, plus extras (`n`, the async micro-batch number)."""

    def __init__(self, runtime, migrations, make, neighbours=False, open_early=True):
        """neighbours: connect the migration levels to both neighbours (a
        policy may start a migration with either later); open_early: TO opens
        the stream on its background thread at the message (async), else at
        its first install (flush: between batches, when FROM opens too, so
        no thread of TO waits in the handshake through batch k)."""
        self.rt, self.make, self.open_early = runtime, make, open_early
        self.todo = [make(*mig, runtime.rank) for mig in migrations if runtime.rank in mig[1:3]]
        self.active, self.done = [], []
        self.helper = Background(f"tern-migration-{runtime.rank}")
        peers = {m.peer for m in self.todo}
        if neighbours:
            peers |= {p for p in (runtime.rank - 1, runtime.rank + 1) if 0 <= p < runtime.p}
        # The migration connections, made and connected at start: a level's
        # first use (its socket or shm ring) and a link's thread cost time that
        # would otherwise fall inside the migration's batches.
        self.links = {}
        if runtime.comm is not None:
            for peer in sorted(peers):
                warm_levels(runtime.comm, runtime.rank, peer)
                self._link(peer)

    def _link(self, peer):
        """The message connection to `peer` (MIGRATION_LEVEL), made on first need."""
        if peer not in self.links:
            self.links[peer] = Link(self.rt.comm, peer, self.rt.log, "mig_msg", "mig_msg", level=MIGRATION_LEVEL)
        return self.links[peer]

    def add(self, mig):
        """A migration decided during the run (--rebalance), before its message batch."""
        if self.rt.rank in mig[1:3]:
            self.todo.append(self.make(*mig, self.rt.rank))

    def message(self, m, at):
        """Steps 1-2: FROM sends the message (its link's thread sends it); TO
        receives it and instantiates the layers (uninitialised: the first
        install fills them).  The weight stream's open is a handshake that
        completes when FROM opens its end at its first push: TO opens at its
        first install, or (open_early) at once in the background."""
        rt = self.rt
        self.todo.remove(m)
        m.link = self._link(m.peer)
        if m.outgoing:
            # Moving right: the stage's last layers; moving left: its first ones.
            m.layers = rt.stage.layers[-m.n:] if m.dst > m.src else rt.stage.layers[:m.n]
            m.link.send(_tensor([m.k, m.n, m.layers[0].index]), at[0], at[1])
        else:
            k, n, first = (int(v) for v in m.link.recv((3,), at[0], at[1]).numpy())
            if (k, n) != (m.k, m.n):
                raise RuntimeError(f"stage {rt.rank}: migration message ({k}, {n}) from stage {m.peer} is not "
                                   f"the expected ({m.k}, {m.n}).")
            start = time.monotonic()
            m.layers = make_layers(range(first, first + n), rt.cfg.layers, rt.cfg.width, rt.cfg.seed, init=False)
            rt.stage.adopt(m.layers)
            rt.log.add(*at[:2], "mig_prepare", start, time.monotonic(), peer=m.peer,
                       layers=list(range(first, first + n)), **at[2])
        m.indices = [layer.index for layer in m.layers]
        m.arrays = [p.detach().numpy() for layer in m.layers for p in (layer.weight, layer.bias)]
        if not m.outgoing and self.open_early:
            self.helper.submit(lambda: self._open(m))
        self.active.append(m)

    def _open(self, m):
        m.stream = self.rt.comm.weight_stream(m.peer, m.src, m.arrays, priority=STREAM_LEVEL)
        _fault(self.rt.rank)

    def push(self, m, version, at):
        """Step 3, FROM: the moving layers' live weights as `version` (returns at once)."""
        if m.stream is None:
            self._open(m)
        start = time.monotonic()
        m.stream.push(m.arrays, version)
        self.rt.log.add(*at[:2], "mig_push", start, time.monotonic(), peer=m.peer, version=version,
                        layers=m.indices, **at[2])

    def install(self, m, version, at, keep_own):
        """Step 3, TO: waits (at most tern's timeout) for `version` or newer and
        installs it.  With keep_own, the updates TO applied itself since the
        last install (its backwards of micro-batches on the new partition) are
        kept on top: each gradient is applied once, at FROM or at TO."""
        start = time.monotonic()
        self.helper.wait()  # the stream is open (or, flush, opened here)
        if m.stream is None:
            self._open(m)
        own = [a - b for a, b in zip(m.arrays, m.installed)] if keep_own and m.installed else None
        got = m.stream.wait(m.arrays, version)
        m.installed = [a.copy() for a in m.arrays] if keep_own else None
        if own:
            for a, d in zip(m.arrays, own):
                a += d
        self.rt.log.add(*at[:2], "mig_install", start, time.monotonic(), peer=m.peer, version=got,
                        layers=m.indices, **at[2])

    def complete(self, m, at, switch_layers=True):
        """Step 4: FROM frees the moved layers, TO has them, the stream closes
        (in the background: Close waits for the peer's acknowledgement), the
        migration connection is drained for the next migration and the pair's
        connection is replaced."""
        rt, start, moved = self.rt, time.monotonic(), m.indices
        if m.outgoing:
            rt.stage.layers = [layer for layer in rt.stage.layers if layer.index not in moved]  # freed
        elif switch_layers:
            rt.stage.layers = m.layers + rt.stage.layers if m.peer < rt.rank else rt.stage.layers + m.layers
        self.helper.submit(m.stream.close)
        m.link.drain()
        rt.replace_link(m.peer)
        self.active.remove(m)
        if m.outgoing:
            self.done.append(m.record())
        m.stream, m.link, m.arrays, m.layers, m.installed = None, None, None, None, None  # the moved tensors go
        rt.log.add(*at[:2], "mig_switch", start, time.monotonic(), peer=m.peer, layers=moved,
                   outgoing=m.outgoing, **at[2])

    def finish(self):
        """The run's end: every background call done (raises what failed)."""
        self.helper.wait()

    def close(self):
        self.helper.close()
        for link in self.links.values():
            link.close()


class Migrator(Steps):
    """A stage's migrations under flush: the runtime calls the hooks at its points of a batch."""

    def __init__(self, runtime, migrations):
        super().__init__(runtime, migrations, Migration, neighbours=runtime.cfg.rebalance, open_early=False)

    def before_forward(self, it):
        """First forward of batch `it`: step 1 when FROM stands before TO."""
        for m in [m for m in self.todo if m.k == it and m.msg_on_forward]:
            self.message(m, (it, -1, {}))

    def before_backward(self, it):
        """First backward of batch `it`: step 1 when FROM stands after TO."""
        for m in [m for m in self.todo if m.k == it and not m.msg_on_forward]:
            self.message(m, (it, -1, {}))

    def after_step(self, it):
        """After batch `it`'s optimizer step: FROM pushes what its next forward
        uses as soon as it exists (a push waits for nobody), TO installs it
        (version = optimizer steps = the next batch's number).  After the
        last of them every weight has moved: step 4 at once, before the
        boundary, so the first batch on the new partition starts ready."""
        for m in list(self.active):
            if m.k <= it < m.switch:
                if m.outgoing:
                    self.push(m, self.rt.stage.version, (it + 1, -1, {}))
                else:
                    self.install(m, it + 1, (it, -1, {}), keep_own=False)
            if it + 1 == m.switch:
                self.complete(m, (m.switch, -1, {}))
        self.helper.check()


def warm_levels(comm, rank, peer):
    """Connects the migration's two levels to `peer` at start: tern opens a
    level's connection on its first use, which costs tens of ms (a socket or
    shm ring and its handshake) that would otherwise land inside the
    migration's batches.  One float each way, the lower rank sending first."""
    import numpy as np
    buf = np.zeros(1, np.float32)
    for level in (MIGRATION_LEVEL, STREAM_LEVEL):
        with at_level(level):
            for sending in ((True, False) if rank < peer else (False, True)):
                (comm.send if sending else comm.recv)(buf, peer)


def _fault(rank):
    """TERN_MIGRATION_FAULT=STAGE: that stage dies right after step 2 of its
    migration (tests: a peer dying mid-migration is an error everywhere)."""
    if os.environ.get("TERN_MIGRATION_FAULT") == str(rank):
        os._exit(3)


def _tensor(values):
    import torch
    return torch.tensor(values, dtype=torch.float32)
