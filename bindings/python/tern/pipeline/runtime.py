"""One stage process of a pipeline run: its layers, its links to the
neighbours, the schedule loop, the batch-boundary measurement and plan, and
what it leaves behind (its layers' weights, its event log, its summary).

A stage owns a list of layers with global indices (`self.layers`) and the
partition (layers per stage) is read at every batch boundary: the live
migration issue changes it there (flush) or inside the async stream.
"""
import json
import os
import statistics
import time

import numpy as np
import torch

from . import host
from .cost import KEEP, Cost
from .data import Batches
from .events import EventLog
from .links import CONTROL_LEVEL, Link, at_level
from .migration import Migrator, plan_partitions, switch_batch
from .migration_async import AsyncMigrator, async_switch_batch
from .model import even_partition, make_layers, partition_bounds, state_dict
from .rebalance import Rebalancer
from .rebalance_async import AsyncRebalance
from .replan import FIELDS, Replanner
from .schedule import BACKWARD, FORWARD, kfkb_order
from .stage import Stage

PROBE_SMALL = 8            # bytes: latency
PROBE_LARGE = 64 * 1024    # bytes (at least one activation message): bandwidth
PROBE_REPEATS = 4          # the fastest of these counts: a loaded host delays some (CI read 3.5x low with 2)
SETTLE = 3                 # batches measured on a new partition before --rebalance moves again


class StageRuntime:
    def __init__(self, cfg, comm, rank):
        torch.set_num_threads(1)  # the same kernels' summation order in every process (bitwise flush)
        torch.manual_seed(cfg.seed)
        self.cfg, self.comm, self.rank, self.p = cfg, comm, rank, cfg.stages
        self.partition = list(cfg.partition or even_partition(cfg.layers, cfg.stages))
        self.initial, self.migrations = list(self.partition), [list(m) for m in cfg.migrate]
        # Every stage knows every batch's partition (migrations come from the run's
        # config); a migration's own two stages also move the layers (migration.py).
        self.partitions = plan_partitions(self.partition, cfg.migrate, cfg.iterations,
                                          *([async_switch_batch(cfg.microbatches)] if cfg.schedule == "async" else []))
        first, end = partition_bounds(self.partition)[rank]
        self.log = EventLog(rank)
        self.stage = Stage(rank, self.p, make_layers(range(first, end), cfg.layers, cfg.width, cfg.seed), cfg, self.log)
        self.data = Batches(cfg.data, cfg.batch, cfg.width, cfg.seed)
        self.up = self._link(rank - 1) if rank > 0 else None
        self.down = self._link(rank + 1) if rank + 1 < self.p else None
        self.migrator = (Migrator if cfg.schedule == "flush" else AsyncMigrator)(self, cfg.migrate)
        self.shared_cores = self._shared_cores()
        self.replanner = Replanner(cfg, self.shared_cores) if rank == 0 else None
        self.rebalancer = Rebalancer(self.replanner, cfg.rebalance_threshold) if rank == 0 and cfg.rebalance else None
        self.plan_by_iter, self.predicted_ms, self.partition_by_iter = [], [], []
        self.starts, self.ends, self.losses, self.cpu = [], [], [], []
        self.backgrounds = []  # recent batches' background load (_background)
        self.host_busy = []    # with shared cores: the host's busy CPU seconds in each flush batch
        self.cost = self._calibrate() if cfg.schedule == "flush" else None

    def _link(self, peer):
        return Link(self.comm, peer, self.log, *(("send_grad", "recv_act") if peer < self.rank
                                                   else ("send_act", "recv_grad")))

    def replace_link(self, peer):
        """A migration's completion: the pair's connection is replaced by a new
        one, which takes over once the old one has sent what was queued to it."""
        if peer < self.rank:
            self.up = self.up.successor()
        else:
            self.down = self.down.successor()

    def _shared_cores(self):
        """The cores the stages share when all of them run on this host (one
        boot: network namespaces and containers of one machine count as one)
        and it has fewer cores than stages; 0 when each stage may have its own.
        Stages that share cores are measured in CPU time and the planner
        shares the cores between the stages that have work (processor
        sharing): in wall time, every stage's ops looked as fast as alone, and
        3-4 stages on 2 cores ran 1.2-1.8x the predicted time
        (perf/RESULTS.md, "2026-11-28: the pipeline planner on shared cores")."""
        if self.comm is None or self.cfg.schedule != "flush":  # async neither measures nor plans
            return 0
        if self.stage.device is not None:  # emulated devices: each stage computes on its own
            return 0
        mine = np.array([host.host_id(), host.cores()], np.float64)
        every = np.zeros(2 * self.p, np.float64)
        with at_level(CONTROL_LEVEL):
            self.comm.allgather(mine, every)
        cores = int(every[1::2].max())
        return cores if len(set(every[0::2])) == 1 and cores < self.p else 0

    def _calibrate(self):
        """{"fwd"|"bwd": Cost} from one micro-batch of 1 sample and one of the whole batch."""
        b = self.cfg.batch
        clock = time.thread_time if self.shared_cores else time.perf_counter
        one, whole = self.stage.time_compute(1, clock=clock), self.stage.time_compute(b, clock=clock)
        return {kind: Cost.calibrate(one[j], whole[j], b) for j, kind in enumerate(("fwd", "bwd"))}

    # ---- the run ----

    def run(self):
        try:
            if self.cfg.schedule == "flush":
                self._run_flush()
            else:
                self._run_async()
            self.migrator.finish()
        finally:
            self.migrator.close()
            for link in (self.up, self.down):
                if link:
                    link.close()

    def _run_flush(self):
        m, k, predicted = self.cfg.microbatches, self.cfg.k, None
        if self.cfg.sweep:
            m, k = self.cfg.sweep[0]
        for it in range(self.cfg.iterations):
            self._set_emulation(it)
            if self.partitions[it][self.rank] != self.partition[self.rank]:
                for cost in self.cost.values():  # an op's cost depends on its layers: measure the new ones
                    cost.reset()
            self.partition = list(self.partitions[it])
            self.plan_by_iter.append([m, k])
            self.predicted_ms.append(predicted)
            self.partition_by_iter.append(list(self.partition))
            self._flush_iteration(it, m, k)
            self._progress(it)
            if it + 1 < self.cfg.iterations:
                m, k, predicted = self._boundary(it, m, k)

    def _flush_iteration(self, it, m, k):
        x, y = self.data.get(it)
        size = self.cfg.batch // m
        self.stage.loss_sum = 0.0
        busy = host.busy_seconds() if self.shared_cores else 0.0
        start, cpu = time.monotonic(), time.process_time()
        order = kfkb_order(m, k, self.p, self.rank)
        for kind, i in order:
            sl = slice(i * size, (i + 1) * size)
            if (kind, i) == (FORWARD, 0):
                self.migrator.before_forward(it)
            elif (kind, i) == (BACKWARD, 0):
                self.migrator.before_backward(it)
            if kind == FORWARD:
                self._forward((it, i), it, i, x[sl], y[sl], size)
            else:
                self._backward((it, i), it, i, size)
        for link in (self.up, self.down):
            if link:
                link.drain()  # the batch's transfers are part of its time
        end = time.monotonic()
        self.cpu.append(time.process_time() - cpu)
        self.host_busy.append(host.busy_seconds() - busy if self.shared_cores else 0.0)
        self.stage.step(it)
        self.migrator.after_step(it)
        self.starts.append(start)
        self.ends.append(end)
        self.losses.append(self.stage.loss_sum if self.stage.last else None)

    def _run_async(self):
        """PipeDream 1F1B over every micro-batch of the run, no flush; one
        optimizer step per micro-batch, weights stashed per forward."""
        m, size = self.cfg.microbatches, self.cfg.batch // self.cfg.microbatches
        total = self.cfg.iterations * m
        balance = AsyncRebalance(self, self._probe(0, m)) if self.cfg.rebalance and self.comm is not None else None
        start = time.monotonic()
        batches = {}
        try:
            self._async_loop(m, size, total, start, batches, balance)
        finally:
            if balance:
                balance.close()

    def _async_loop(self, m, size, total, start, batches, balance):
        for kind, n in kfkb_order(total, 1, self.p, self.rank):
            it, i = divmod(n, m)
            if it not in batches:  # this stage's first op of batch `it`
                self._set_emulation(it)
                batches[it] = self.data.get(it)
                self.partition = list(self.partitions[it])
            x, y = batches[it]
            sl = slice(i * size, (i + 1) * size)
            if kind == FORWARD:
                self.migrator.before_forward(n, it, i)
                self._forward(n, it, i, x[sl], y[sl], size, self.migrator.layers_for(n))
            else:
                self.migrator.before_backward(n, it, i)
                self._backward(n, it, i, size)
                self.migrator.after_backward(n, it, i)
                if i == m - 1:  # the batch's last backward at this stage
                    self.starts.append(self.ends[-1] if self.ends else start)
                    self.ends.append(time.monotonic())
                    self.losses.append(self.stage.loss_sum if self.stage.last else None)
                    self.stage.loss_sum = 0.0
                    self.plan_by_iter.append([m, 1])
                    self.predicted_ms.append(None)
                    self.partition_by_iter.append(list(self.partitions[it]))
                    batches.pop(it - 1, None)
                    if balance:
                        balance.boundary(it)
        for link in (self.up, self.down):
            if link:
                link.drain()

    def _forward(self, key, it, i, x, y, size, layers=None):
        inp = x if self.up is None else self._recv(self.up, size, it, i)
        out = self.stage.forward(key, it, i, inp, y if self.stage.last else None, layers)
        if self.down is not None:
            self._send(self.down, out, it, i)

    def _backward(self, key, it, i, size):
        grad = None if self.down is None else self._recv(self.down, size, it, i)
        gin = self.stage.backward(key, it, i, grad)
        if self.up is not None:
            self._send(self.up, gin, it, i)

    def _wire_rows(self, size):
        """A micro-batch's rows on the wire: with --emulate-batch, the emulated
        batch's (the real math runs on `size` rows; the rest is padding)."""
        return -(-size * self.cfg.emulate_batch // self.cfg.batch) if self.cfg.emulate_batch else size

    def _send(self, link, tensor, it, i):
        rows = self._wire_rows(len(tensor))
        if rows > len(tensor):
            tensor = torch.cat([tensor, tensor.new_zeros((rows - len(tensor),) + tuple(tensor.shape[1:]))])
        link.send(tensor, it, i)

    def _recv(self, link, size, it, i):
        return link.recv((self._wire_rows(size), self.cfg.width), it, i)[:size]

    def _progress(self, it):
        if self.cfg.progress and self.rank == 0:
            with open(self.cfg.progress + ".tmp", "w") as f:
                f.write(str(it))
            os.replace(self.cfg.progress + ".tmp", self.cfg.progress)

    def _set_emulation(self, it):
        for at, gbps in self.cfg.emulate:
            if at == it:
                for link in (self.up, self.down):
                    if link:
                        link.emulate_gbps = gbps or None

    # ---- batch boundary: measure, gather, decide ----

    def _boundary(self, it, m, k):
        start = time.monotonic()
        row = self._measure(it, m)
        rows = self._gather(row)
        decision = np.array([0, 0, 0, -1, -1, 0], np.float64)  # m, K, predicted ms; a layer move: from, to, n
        forced = self.cfg.sweep[(it + 1) % len(self.cfg.sweep)] if self.cfg.sweep else None
        if self.rank == 0:
            decision[:3] = self.replanner.decide(it, self.partition, rows, (m, k), forced)
            if self.rebalancer:
                move = self.rebalancer.decide(it, self.partition, rows, m, k, self._idle(it))
                if move:
                    decision[3:] = move + (1,)
        if self.comm is not None:
            with at_level(CONTROL_LEVEL):
                self.comm.broadcast(decision, root=0)
        if decision[3] >= 0:
            self.add_migration([it + 1, int(decision[3]), int(decision[4]), int(decision[5])])
        self.log.add(it, -1, "plan", start, time.monotonic(), m=int(decision[0]), k=int(decision[1]))
        return int(decision[0]), int(decision[1]), float(decision[2])

    def _idle(self, it):
        """No migration in progress or just done (the new partition measured for
        SETTLE batches: a stage's cost history restarts when its layers change,
        and one batch on a loaded host can be far off), and one started now
        would complete in the run."""
        return (all(switch_batch(k, s, d) + SETTLE - 1 <= it for k, s, d, _ in self.migrations)
                and it + 3 < self.cfg.iterations)

    def add_migration(self, mig):
        """A migration decided during the run (--rebalance), before its message batch."""
        self.migrations.append(mig)
        self.partitions = plan_partitions(self.initial, self.migrations, self.cfg.iterations,
                                          *([async_switch_batch(self.cfg.microbatches)]
                                            if self.cfg.schedule == "async" else []))
        self.migrator.add(mig)

    def _measure(self, it, m):
        """This stage's row: compute (the fixed part calibrated, the per-sample
        part re-measured from the batch just run), its link, its times."""
        size = self.cfg.batch // m
        row = {}
        for kind in ("fwd", "bwd"):
            cost = self.cost[kind]
            if it > 0:  # batch 0 pays the warm-up (first connections, allocator): keep the calibration
                # The median op: robust to the preemptions of a shared host.
                times = sorted(self._op_seconds(it, kind))
                cost.observe(size, times[len(times) // 2] * 1e3)
            row[kind + "_fixed_ms"], row[kind + "_ms_per_sample"] = cost.fixed, cost.per_sample
        row["link_gbps"], row["link_latency_us"] = self._probe(it, m)
        row["background_cores"] = 0.0
        row["cpu_s"], row["host_busy_s"] = self.cpu[-1], self.host_busy[-1]
        if self.shared_cores:
            row["background_cores"] = self._background(it)
            if self.down is not None:
                row["link_latency_us"] += self._handoff_us(it)
        row["start"], row["end"] = self.starts[-1], self.ends[-1]
        return row

    def _op_seconds(self, it, kind):
        """What each of batch `it`'s `kind` ops took: its wall time on a
        device of its own, its CPU time where the stages share cores (there
        the wall time counts the other stages' turns too)."""
        ops = self.log.of(it, kind)
        return [e["cpu"] if self.shared_cores else e["end"] - e["start"] for e in ops]

    def _background(self, it):
        """The part of a core this process took outside its ops in batch `it`
        (receiving, handing sends over, waiting on shared memory: 0.1-0.4 of a
        core per stage on this 2-core host, and for one stage about the same
        whatever m), as the median of the last few batches."""
        ops = self.log.of(it, "fwd") + self.log.of(it, "bwd")
        outside = self.cpu[-1] - sum(e["cpu"] for e in ops)
        idle = (self.ends[-1] - self.starts[-1]) - sum(e["end"] - e["start"] for e in ops)
        self.backgrounds = (self.backgrounds + [max(outside, 0.0) / max(idle, 1e-4)])[-KEEP:]
        return statistics.median(self.backgrounds)

    def _handoff_us(self, it):
        """The median delay between an activation being ready to go (its
        forward ended and the link's previous send was done: waiting behind
        that one is the wire's time, which the model has) and its send
        starting on the link's sender thread: with shared cores that thread
        waits for a core (0.2 ms median, 1.5 ms at p90 with 4 stages on 2
        cores), a latency the idle boundary's probe does not see."""
        ends = {e["micro"]: e["end"] for e in self.log.of(it, "fwd")}
        delays, previous = [], 0.0
        for e in sorted(self.log.of(it, "send_act"), key=lambda e: e["start"]):
            if e["micro"] in ends:
                delays.append(e["start"] - max(ends[e["micro"]], previous))
            previous = e["end"]
        return max(statistics.median(delays), 0.0) * 1e6 if delays else 0.0

    def _probe(self, it, m):
        """Ping-pong on the links, one link at a time down the pipeline (stage s
        answers s-1's probe, then probes s+1): this stage's outgoing link's
        (Gbit/s, latency us), or (0, 0) at the last stage."""
        large = max(PROBE_LARGE, (self.cfg.batch // m) * self.cfg.width * 4)
        if self.up is not None:
            for size in [PROBE_SMALL] * PROBE_REPEATS + [large] * PROBE_REPEATS:
                got = self.up.recv((size // 4,), it, -1, kind="probe")
                self.up.send(got, it, -1, kind="probe")
        if self.down is None:
            return 0.0, 0.0
        rtt = {}
        for size in [PROBE_SMALL] * PROBE_REPEATS + [large] * PROBE_REPEATS:
            buf = torch.zeros(size // 4)
            t0 = time.monotonic()
            self.down.send(buf, it, -1, kind="probe")
            self.down.recv((size // 4,), it, -1, kind="probe")
            rtt[size] = min(rtt.get(size, float("inf")), time.monotonic() - t0)
        one_way = (rtt[large] - rtt[PROBE_SMALL]) / 2
        gbps = (large - PROBE_SMALL) * 8 / max(one_way, 1e-7) / 1e9
        return min(gbps, 1000.0), rtt[PROBE_SMALL] / 2 * 1e6

    def _gather(self, row):
        mine = np.array([row[f] for f in FIELDS], np.float64)
        if self.comm is None:
            return [row]
        every = np.zeros(len(FIELDS) * self.p, np.float64)
        with at_level(CONTROL_LEVEL):
            self.comm.allgather(mine, every)
        return [dict(zip(FIELDS, every[s * len(FIELDS):(s + 1) * len(FIELDS)])) for s in range(self.p)]

    # ---- what the stage leaves ----

    def summary(self):
        return {"stage": self.rank, "layers": [layer.index for layer in self.stage.layers],
                "starts": self.starts, "ends": self.ends, "cpu": self.cpu, "losses": self.losses,
                "plan_by_iter": self.plan_by_iter, "predicted_ms": self.predicted_ms,
                "partition_by_iter": self.partition_by_iter,
                "weight_versions_ok": self.stage.weight_versions_ok(),
                "overruns": self.stage.overruns(),
                "version_checks": len(self.stage.version_checks),
                "decisions": self.replanner.decisions if self.replanner else [],
                "migrations": self.migrator.done,
                "rebalance": self.rebalancer.log if self.rebalancer else [],
                # bytes per network flow class: the migration's levels are classes of their own
                "flow_stats": self.comm.flow_stats() if self.comm is not None else None}

    def save(self, directory):
        torch.save(state_dict(self.stage.layers), os.path.join(directory, f"stage{self.rank}.pt"))
        self.log.dump(os.path.join(directory, f"events-stage{self.rank}.json"))
        with open(os.path.join(directory, f"stage{self.rank}.json"), "w") as f:
            json.dump(self.summary(), f)
