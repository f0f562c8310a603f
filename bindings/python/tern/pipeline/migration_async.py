"""Live layer migration under the async schedule (PipeDream 1F1B with weight
stashing), the protocol of docs/DESIGN.md
("The migration protocol", seed 000) in micro-batch numbers (a
PipeDream "batch" is one of our micro-batches; migration.py has the steps).

For --migrate ITER:FROM:TO:n, k = ITER * m (the batch's first micro-batch),
N stages, t = TO, and D = N - max(FROM, TO) (the micro-batches in flight
between the pair).  In 1F1B stage s runs forward f right after backward
f - (N - s), which fixes every point below:

- message: FROM sends (k, n, first layer) before its forward k if it stands
  before TO, before its backward k+1-D if after; TO receives it before its
  backward k+1-D (= k-N+t+1 / k-N+t+2), instantiates the layers and opens
  the weight stream;
- alternating computation: forwards from `switch` = k+1 (FROM before TO) or
  k+2 (after) run on the new partition, so the moving layers compute at TO;
  the backward of every micro-batch runs on the partition its forward used
  (earlier ones at FROM, through the weights stashed at their forward), so
  every backward uses its forward's weights;
- FROM pushes the moving layers' live weights before each forward f in
  k+1 .. k+1+D (version f); its backwards of the old micro-batches keep
  updating them until the last, switch-1, which comes before forward
  k+1+D: that push is final, and FROM frees the layers;
- TO installs after each backward j in k+1-D .. k+1 the version j+D (pushed
  after FROM's backward j+D-(N-FROM), so waiting for it never waits on TO
  itself), keeping on top the updates its own backwards of new
  micro-batches already applied: every gradient is applied exactly once,
  at FROM (old micro-batches) or at TO (new ones).  After the final install
  the layers are TO's.
"""
from .migration import Migration, Steps


def async_switch_batch(m):
    """switch_batch for plan_partitions: the first batch whose first forward
    runs on the new partition."""
    return lambda it, src, dst: -(-(it * m + (1 if src < dst else 2)) // m)


def check_async(migrations, m, stages, iterations):
    """ValueError with a sentence when a migration cannot complete inside the run."""
    for it, src, dst, n in migrations:
        d = stages - max(src, dst)
        if it * m + 1 - d < 0 or it * m + 1 + d >= iterations * m:
            raise ValueError(f"--migrate {it}:{src}:{dst}:{n}: under async it spans micro-batches "
                             f"{it * m + 1 - d}..{it * m + 1 + d}, outside the run's 0..{iterations * m - 1}.")


class AsyncMigration(Migration):
    def __init__(self, it, src, dst, n, rank, m, stages):
        super().__init__(it * m, src, dst, n, rank)
        self.iteration, self.m = it, m
        self.d = stages - max(src, dst)
        self.switch = self.k + 1 if src < dst else self.k + 2   # first forward on the new partition
        self.final = self.k + 1 + self.d                        # FROM's last push (before this forward)

    def record(self):
        return {"from": self.src, "to": self.dst, "layers": self.indices, "message_iter": self.iteration,
                "done_iter": self.final // self.m, "message_micro": self.k, "done_micro": self.final}


class AsyncMigrator(Steps):
    def __init__(self, runtime, migrations):
        cfg = runtime.cfg
        check_async(migrations, cfg.microbatches, cfg.stages, cfg.iterations)
        super().__init__(runtime, migrations,
                         lambda *a: AsyncMigration(*a, m=cfg.microbatches, stages=cfg.stages),
                         neighbours=cfg.rebalance)

    def layers_for(self, n):
        """The layers forward n runs through (new partition from `switch` on)."""
        layers = list(self.rt.stage.layers)
        for m in self.active:
            if n >= m.switch and m.outgoing:
                layers = [layer for layer in layers if layer.index not in m.indices]
            elif n >= m.switch:
                layers = m.layers + layers if m.peer < self.rt.rank else layers + m.layers
        return layers

    def before_forward(self, n, it, i):
        at = (it, i, {"n": n})
        for m in [m for m in self.todo if m.outgoing and m.msg_on_forward and n == m.k]:
            self.message(m, at)
        for m in [m for m in self.active if m.outgoing and m.k < n <= m.final]:
            self.push(m, n, at)
            if n == m.final:
                self.complete(m, at)

    def before_backward(self, n, it, i):
        for m in [m for m in self.todo if n == m.k + 1 - m.d and not (m.outgoing and m.msg_on_forward)]:
            self.message(m, (it, i, {"n": n}))

    def after_backward(self, n, it, i):
        at = (it, i, {"n": n})
        for m in [m for m in self.active if not m.outgoing and m.k + 1 - m.d <= n <= m.k + 1]:
            self.install(m, n + m.d, at, keep_own=True)
            if n == m.k + 1:
                self.complete(m, at)
