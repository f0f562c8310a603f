"""tern.torch.PriorityScheduler: DDP's gradient allreduces issued per
parameter at priority levels from the computation graph (docs/DESIGN.md,
"Priorities from the computation graph"; TicTac / ByteScheduler).

    model = DDP(net)                                   # over backend "tern"
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = tern.torch.PriorityScheduler(model, opt, policy="tac", sample_batch=x0)
    for x, y in loader:
        loss_fn(model(x), y).backward()   # each gradient's allreduce starts as it is ready
        sched.step()                      # instead of opt.step(); returns at once
    sched.synchronize()                   # the last updates, before evaluating or saving

Each gradient is scaled by 1/world (as DDP does), split into partitions of
`partition_bytes` and allreduced at its parameter's level; small gradients
that become ready one after another at the same level are fused into one
allreduce of up to `fusion_bytes` (as DDP's buckets and Horovod's fusion
buffer do: a ResNet-50 has 161 parameter tensors, most of them a few KB);
a thread issues the ready partitions most urgent level first while at most
`credit_bytes` are in flight.  When a parameter's last partition arrives, the thread
updates that parameter with its own copy of the user's optimizer (same
class, same hyper-parameters, the user optimizer's state object), and a
forward pre-hook on the module that owns it lets the next forward of that
module start then: the last layers' communication overlaps the next
iteration's first layers.

Ranks match tern operations per level in issue order, so each level's
partitions are issued in one fixed order (the order gradients became ready
in the traced backward) on every rank, and rank 0's levels are used by all.
"""
import queue
import threading
import time

import torch
import torch.distributed as dist

from . import scheduler_plan, set_priority
from .process_group import tern_group

# Updated one parameter at a time, these give what one step over all gives.
SUPPORTED_OPTIMIZERS = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)
_TERNARY_HANDLE_BASE = 0x7363 << 32  # distinct from TernaryState's bucket handles


class _Slot:
    """One parameter: its reduced gradient, its own optimizer, its unit."""

    def __init__(self, index, name, param, level, group, optimizer):
        self.index, self.name, self.param, self.level, self.group = index, name, param, level, group
        self.proxy = param.detach()  # same storage: the update reaches the parameter through it
        hyper = {k: v for k, v in group.items() if k != "params"}
        self.optimizer = type(optimizer)([dict(hyper, params=[self.proxy])], lr=hyper["lr"])
        self.optimizer.state[self.proxy] = optimizer.state[param]  # one state, saved by the user's
        self.done = threading.Event()
        self.done.set()
        self.buf = self.hyper = None
        self.iteration = 0
        self.unit, self.offset = None, 0  # where its gradient travels: a unit, from this element


class _Unit:
    """What goes on the wire: one parameter's gradient in partitions, or several
    small ones fused into one buffer (kept across iterations: no allocation per
    step), reduced as one and then handed back to each parameter as a view."""

    def __init__(self, index, members, partition_elems):
        self.index, self.members, self.level = index, members, members[0].level
        n = sum(s.param.numel() for s in members)
        self.chunks = [(o, min(partition_elems, n - o)) for o in range(0, n, partition_elems)]
        size = members[0].param.element_size()
        self.nbytes = [c * size for _, c in self.chunks]
        self.flat = None
        if len(members) > 1:
            self.flat = torch.empty(n, dtype=members[0].param.dtype)
        offset = 0
        for s in members:
            s.unit, s.offset = self, offset
            offset += s.param.numel()
        self.pending = len(members)  # members whose gradient has yet to arrive this iteration
        self.left = self.iteration = 0
        self.ternary = False  # this iteration's gradients go by ternary allreduce

    @property
    def buf(self):
        return self.flat if self.flat is not None else self.members[0].buf


class PriorityScheduler:
    """Per-parameter allreduces at priority levels, updates as gradients arrive.

    ddp_model: a DistributedDataParallel over backend "tern"; its own
    gradient synchronisation is turned off while the scheduler is open.
    optimizer: torch.optim.SGD, Adam or AdamW over the model's parameters
    (elementwise optimizers, which the scheduler applies per parameter);
    others are refused.  policy: "tac", "tic", "layer" or "fifo" (one level
    for all: the per-parameter overlap without priorities, a baseline).  sample_batch: an
    input of the model, traced once (forward + backward) for the levels.
    ternary: a tern.torch.TernaryState to reduce with ternary allreduce
    (its warmup_steps and codec options apply).  record: keep a span per
    allreduce partition and per update (spans()).  fusion_bytes: gradients smaller
    than this that become ready one after another at one level travel in one
    allreduce of up to this many bytes (default partition_bytes; 0: each alone).

    Every parameter must get a gradient each iteration (as with DDP's
    find_unused_parameters=False), one backward per step; gradients are
    consumed (param.grad is None after the backward), so zero_grad is not
    needed.  Buffers (batch norm) are not broadcast, gradient clipping over
    all parameters is not possible (each is updated as soon as it arrives).
    """

    def __init__(self, ddp_model, optimizer, policy="tac", sample_batch=None, ternary=None,
                 partition_bytes=1 << 20, credit_bytes=4 << 20, bandwidth_gbps=1.0, record=False,
                 fusion_bytes=None):
        scheduler_plan.check_policy(policy)
        _check_optimizer(optimizer)
        if sample_batch is None:
            raise ValueError("PriorityScheduler needs sample_batch, an input of the model to trace once.")
        if partition_bytes <= 0 or credit_bytes <= 0:
            raise ValueError("partition_bytes and credit_bytes must be positive.")
        fusion_bytes = partition_bytes if fusion_bytes is None else fusion_bytes
        if fusion_bytes < 0:
            raise ValueError("fusion_bytes must be 0 (no fusion) or positive.")
        self.ddp, self.policy, self.ternary = ddp_model, policy, ternary
        self.pg = ddp_model.process_group
        self._tern_pg = tern_group(self.pg)  # refuses other backends: levels are tern's
        self.world = dist.get_world_size(self.pg)
        self.plan = _shared_plan(ddp_model.module, sample_batch, policy, bandwidth_gbps, self.pg)
        self._slots = _make_slots(ddp_model.module, optimizer, self.plan)
        self._units = _make_units(self._slots, self.plan["backward"], partition_bytes, fusion_bytes)
        self._seq = _level_sequences(self._units)
        self._cursor = [0] * scheduler_plan.LEVELS
        self._credit, self._in_flight = credit_bytes, [0] * scheduler_plan.LEVELS
        self._ready, self._finished = set(), []
        self._waiters = [queue.SimpleQueue() for _ in range(scheduler_plan.LEVELS)]
        self._cv = threading.Condition()
        self._arrived, self.iteration, self._error, self._stop = 0, 0, None, False
        self._record, self._spans, self.t0 = record, [], time.perf_counter()
        self._hooks = _install_hooks(ddp_model.module, self._slots, self._on_gradient, self._wait)
        ddp_model.require_backward_grad_sync = False  # DDP's buckets stay idle: we reduce
        self._threads = [threading.Thread(target=self._run, name="tern-priority-scheduler", daemon=True)]
        self._threads += [threading.Thread(target=self._wait_level, args=(level,), daemon=True,
                                           name=f"tern-priority-level{level}")
                          for level in sorted({s.level for s in self._slots})]
        for t in self._threads:
            t.start()

    # ---- the training loop's calls ------------------------------------------------------

    def levels(self):
        """{param name: level} this scheduler uses (rank 0's plan)."""
        return {s.name: s.level for s in self._slots}

    def step(self):
        """Ends the iteration: checks that every parameter got its gradient
        (their allreduces and updates are already under way) and returns."""
        self._raise_if_failed()
        with self._cv:
            arrived, self._arrived = self._arrived, 0
        if arrived != len(self._slots):
            raise RuntimeError(f"PriorityScheduler.step: {arrived} of {len(self._slots)} parameters got a "
                               "gradient since the last step; every parameter needs one per iteration "
                               "(one backward per step, no unused parameters).")
        self.iteration += 1

    def synchronize(self):
        """Waits until every parameter is updated (before evaluating, saving, reading weights)."""
        for slot in self._slots:
            self._wait(slot)

    def spans(self):
        """With record=True: [{"iteration", "param", "level", "kind": "allreduce"|"update",
        "chunk", "bytes", "start", "end"}], seconds since self.t0 (time.perf_counter() when it was made)."""
        with self._cv:
            return list(self._spans)

    def close(self):
        """Waits for the updates, stops the thread, gives DDP its synchronisation back."""
        try:
            self.synchronize()
        finally:
            with self._cv:
                self._stop = True
                self._cv.notify()
            for q in self._waiters:
                q.put(None)
            for t in self._threads:
                t.join()
            for h in self._hooks:
                h.remove()
            self.ddp.require_backward_grad_sync = True

    # ---- the backward's side ---------------------------------------------------------------

    def _on_gradient(self, slot):
        """A parameter's gradient is accumulated: take it and queue its partitions."""
        self._wait(slot)  # its previous update (the forward pre-hook has normally waited already)
        grad = slot.param.grad
        slot.param.grad = None
        unit = slot.unit
        slot.iteration = unit.iteration = self.iteration
        unit.ternary = self.ternary is not None and self.iteration >= self.ternary.warmup_steps
        scale = 1.0 if unit.ternary else 1.0 / self.world  # ternary allreduce averages; dense sums (DDP's division)
        grad = grad.detach().reshape(-1)
        if unit.flat is not None:  # into its place in the fused buffer, scaled on the way
            slot.buf = unit.flat[slot.offset:slot.offset + grad.numel()]
            torch.mul(grad, scale, out=slot.buf)
        else:
            # The gradient is ours (param.grad is cleared), so it is reduced and
            # scaled in place: a fresh buffer per parameter and iteration costs a
            # page fault per 4 KiB where the allocator hands large freed blocks
            # back to the kernel (~100 ms for 25 MB on a VM, a stall in the backward).
            slot.buf = grad.contiguous()
            if scale != 1.0:
                slot.buf.mul_(scale)
        slot.hyper = {k: v for k, v in slot.group.items() if k != "params"}  # this step's lr
        slot.done.clear()
        with self._cv:
            self._arrived += 1
            unit.pending -= 1
            if not unit.pending:  # its last member: the unit goes
                unit.pending, unit.left = len(unit.members), len(unit.chunks)
                self._ready.update((unit.index, c) for c in range(len(unit.chunks)))
                self._cv.notify()

    def _wait(self, slot):
        while not slot.done.wait(0.05):
            self._raise_if_failed()
        self._raise_if_failed()

    def _raise_if_failed(self):
        if self._error is not None:
            raise RuntimeError(f"PriorityScheduler: an allreduce or update failed: {self._error}") \
                from self._error

    # ---- the scheduler thread --------------------------------------------------------------

    def _run(self):
        try:
            while True:
                with self._cv:
                    issue = self._pick()
                    while not (issue or self._finished or self._stop):
                        self._cv.wait()
                        issue = self._pick()
                    if self._stop and not issue:
                        return
                    finished, self._finished = self._finished, []
                for item in issue:
                    self._issue(item)
                for item in finished:
                    self._arrive(item)
        except BaseException as e:  # noqa: B902 - every waiter must learn of it
            self._fail(e)

    def _pick(self):
        """Ready partitions to issue now, most urgent level first, each level
        in its fixed order.  ByteScheduler's credit, counting only the
        bytes in flight at this level and more urgent ones: a partition
        waits while issuing it would put more than the credit in flight
        there.  Less urgent work never holds back more urgent work: an op
        completes only once every rank has issued it, so that wait could
        deadlock two ranks whose timing differs; this way the most urgent
        level with work waits only on its own ops, which every rank issues
        in the same order, so it drains, then the next."""
        out = []
        for level, seq in enumerate(self._seq):
            while seq and seq[self._cursor[level]] in self._ready:
                item = seq[self._cursor[level]]
                nbytes = self._units[item[0]].nbytes[item[1]]
                upto = sum(self._in_flight[:level + 1])
                if upto and upto + nbytes > self._credit:
                    return out  # and every less urgent level waits too
                self._ready.discard(item)
                self._cursor[level] = (self._cursor[level] + 1) % len(seq)
                self._in_flight[level] += nbytes
                out.append(item)
        return out

    def _issue(self, item):
        unit = self._units[item[0]]
        offset, count = unit.chunks[item[1]]
        part = unit.buf[offset:offset + count]
        set_priority(unit.level)  # this thread's level: the backend issues at it
        started = time.perf_counter()
        if unit.ternary:
            work = self._tern_pg.allreduce_ternary(part, _TERNARY_HANDLE_BASE + (unit.index << 16) + item[1])
        else:
            work = dist.all_reduce(part, group=self.pg, async_op=True)
        self._waiters[unit.level].put((item, started, work))

    def _wait_level(self, level):
        """One thread per level waits on its works in issue order (a level's
        ops complete in that order).  Not the futures: the backend completes
        those in issue order across levels, so an urgent op's future would
        wait for the bulk ops issued before it."""
        while True:
            job = self._waiters[level].get()
            if job is None:
                return
            item, started, work = job
            try:
                work.wait()
            except BaseException as e:  # noqa: B902 - every waiter must learn of it
                self._fail(e)
                return
            self._complete(item, started)

    def _complete(self, item, started):
        """Release the credit, wake the scheduler."""
        ended = time.perf_counter()
        unit = self._units[item[0]]
        with self._cv:
            self._in_flight[unit.level] -= unit.nbytes[item[1]]
            self._finished.append(item)
            if self._record:
                self._spans.append(dict(iteration=unit.iteration, param=_unit_name(unit), level=unit.level,
                                        kind="allreduce", chunk=item[1], bytes=unit.nbytes[item[1]],
                                        start=started - self.t0, end=ended - self.t0))
            self._cv.notify()

    def _arrive(self, item):
        """A partition is reduced; the unit's last one updates its parameters."""
        unit = self._units[item[0]]
        unit.left -= 1
        if unit.left:
            return
        for slot in unit.members:
            self._update(slot)

    def _update(self, slot):
        started = time.perf_counter()
        opt = slot.optimizer
        opt.param_groups[0].update(slot.hyper)
        slot.proxy.grad = slot.buf.view_as(slot.proxy)
        opt.step()
        slot.proxy.grad = slot.buf = None
        if self._record:
            with self._cv:
                self._spans.append(dict(iteration=slot.iteration, param=slot.name, level=slot.level,
                                        kind="update", chunk=-1, bytes=0, start=started - self.t0,
                                        end=time.perf_counter() - self.t0))
        slot.done.set()

    def _fail(self, error):
        if self._error is None:
            self._error = error
        for slot in self._slots:
            slot.done.set()  # waiters wake and raise


def _check_optimizer(optimizer):
    if type(optimizer) not in SUPPORTED_OPTIMIZERS:
        names = ", ".join(c.__name__ for c in SUPPORTED_OPTIMIZERS)
        raise TypeError(f"PriorityScheduler updates each parameter on its own as its gradient arrives, "
                        f"which gives the same result only for elementwise optimizers ({names}); "
                        f"got {type(optimizer).__name__}.")


def _shared_plan(module, sample_batch, policy, bandwidth_gbps, pg):
    """Rank 0's plan on every rank: TAC's levels follow measured times, which
    differ per rank, and every rank must issue each level in the same order."""
    box = [scheduler_plan.make(module, sample_batch, policy, bandwidth_gbps)
           if dist.get_rank(pg) == 0 else None]
    dist.broadcast_object_list(box, src=0, group=pg)
    return box[0]


def _make_slots(module, optimizer, plan):
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    slots = []
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        if id(p) not in group_of:
            raise ValueError(f"parameter {name} is not in the optimizer; PriorityScheduler updates every "
                             "parameter of the model that requires a gradient.")
        level = plan["level"].get(name, scheduler_plan.LEVELS - 1)  # untraced: bulk
        slots.append(_Slot(len(slots), name, p, level, group_of[id(p)], optimizer))
    return slots


def _make_units(slots, backward, partition_bytes, fusion_bytes):
    """The units in the order the traced backward readies their gradients: a
    gradient of at least `fusion_bytes` alone, smaller ones that follow each other
    at one level (and one dtype) fused while their sum stays within it.  Every
    rank fuses the same way: the order and the levels are rank 0's plan."""
    rank = {name: i for i, name in enumerate(backward)}
    groups, run, run_bytes = [], [], 0
    for slot in sorted(slots, key=lambda s: (rank.get(s.name, len(rank)), s.index)):
        nbytes = slot.param.numel() * slot.param.element_size()
        joins = (run and nbytes < fusion_bytes and run_bytes + nbytes <= fusion_bytes
                 and run[0].level == slot.level and run[0].param.dtype == slot.param.dtype)
        if not joins:
            if run:
                groups.append(run)
            run, run_bytes = [], 0
        run.append(slot)
        run_bytes += nbytes
        if nbytes >= fusion_bytes:  # too big to share: alone
            groups.append(run)
            run, run_bytes = [], 0
    if run:
        groups.append(run)
    units = []
    for members in groups:
        elems = max(1, partition_bytes // members[0].param.element_size())
        units.append(_Unit(len(units), members, elems))
    return units


def _unit_name(unit):
    """A span's param: the parameter's name, or "first+N" for a fused unit."""
    first = unit.members[0].name
    return first if len(unit.members) == 1 else f"{first}+{len(unit.members) - 1}"


def _level_sequences(units):
    """Per level, its units' partitions in the order the traced backward readies them."""
    seq = [[] for _ in range(scheduler_plan.LEVELS)]
    for unit in units:
        seq[unit.level].extend((unit.index, c) for c in range(len(unit.chunks)))
    return seq


def _install_hooks(module, slots, on_gradient, wait):
    """A hook on each parameter's gradient accumulator (as DDP's reducer
    does; torch 1.13 has no post-accumulate hook) and a forward pre-hook on
    each module that owns parameters, waiting for their updates."""
    handles, by_param = [], {id(s.param): s for s in slots}
    for s in slots:
        acc = s.param.expand_as(s.param).grad_fn.next_functions[0][0]
        s.accumulator = acc  # keeps the node (and so the hook) alive
        handles.append(acc.register_hook(lambda *_, s=s: on_gradient(s)))
    for m in module.modules():
        own = [by_param[id(p)] for p in m.parameters(recurse=False) if id(p) in by_param]
        if own:
            handles.append(m.register_forward_pre_hook(_waiting_for(own, wait)))
    return handles


def _waiting_for(slots, wait):
    def pre_hook(module, inputs):
        for s in slots:
            wait(s)
    return pre_hook
