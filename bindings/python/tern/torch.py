"""The c10d backend "tern" and a ternary DDP communication hook.

    import tern.torch                       # registers backend "tern"
    dist.init_process_group("tern")         # torchrun env, or init_method=...
    model = DDP(model)
    state = tern.torch.TernaryState(dist.group.WORLD, warmup_steps=10)
    model.register_comm_hook(state, tern.torch.ternary_hook)

    sched = tern.torch.PriorityScheduler(model, opt, policy="tac", sample_batch=x)
    # per-parameter allreduces at TicTac levels (tern/scheduler.py)

The backend works on CPU tensors.  Every operation returns at once with a
Work whose future completes when tern's operation does (async_op=True does
not block).  The hook averages each gradient bucket with
ternAllReduceTernary (2-bit stochastic codes, unbiased); with error feedback
the rounding error of one step is added back the next.
"""
import torch
import torch.distributed as dist

from . import _c10d
from .process_group import ProcessGroupTern, tern_group  # noqa: F401 - part of tern.torch
from .scheduler import PriorityScheduler  # noqa: F401 - part of tern.torch


def _create(store, rank, size, timeout):
    return _c10d.create(store, rank, size, timeout)


def _register():
    if "TERN" in dist.Backend._plugins:
        return
    try:  # torch 2.x: say which devices the backend serves
        dist.Backend.register_backend("tern", _create, devices=["cpu"])
    except TypeError:  # torch 1.x
        dist.Backend.register_backend("tern", _create)


_register()


class TernaryState:
    """Options and per-bucket state of ternary_hook.

    seed, block, clip, error_feedback: as ternTernaryConfig_t (docs/TERNARY.md);
    the same on every rank.  error_feedback is off by default: measured on
    Fashion-MNIST (docs/TERNARY.md, "Defaults"), ternary without it reached
    dense's accuracy or better over 3 seeds and trained faster (the
    residual costs a second pass of the codec per step); turn it on when a
    model's accuracy lags dense.  warmup_steps: that many first steps are reduced
    dense (exact average) before compression starts.  min_bytes: buckets
    smaller than this stay dense.

    DDP rebuilds its buckets after the first step (and may again): each
    bucket's error-feedback residual is keyed by the identity of the
    parameters in it, so a rebuilt bucket starts a fresh residual and the
    residuals of buckets that no longer exist are released at the end of
    the step.
    """

    def __init__(self, process_group=None, seed=0x7465726E, block=256, clip=0.0,
                 error_feedback=False, warmup_steps=0, min_bytes=0):
        self.process_group = process_group
        self.pg = tern_group(process_group)
        self.world_size = self.pg.size()
        self.warmup_steps = warmup_steps
        self.step = 0
        self.pg.set_ternary_config(seed=seed, block=block, clip=clip,
                                   error_feedback=error_feedback, min_bytes=min_bytes)
        self._handles = {}   # bucket key -> handle
        self._used = set()
        self.buckets_last_step = 0
        self._next = 1

    def handle(self, bucket):
        key = (bucket.index(), bucket.buffer().numel(),
               tuple(p.data_ptr() for p in bucket.parameters()))
        h = self._handles.get(key)
        if h is None:
            h = self._handles[key] = self._next
            self._next += 1
        self._used.add(key)
        return h

    def end_step(self):
        for key in [k for k in self._handles if k not in self._used]:
            self.pg.release_tensor(self._handles.pop(key))
        self.buckets_last_step = len(self._used)
        self._used.clear()
        self.step += 1

    def stats(self):
        return self.pg.ternary_stats()


def ternary_hook(state, bucket):
    """DDP comm hook: the bucket's gradients averaged by ternary allreduce."""
    buf = bucket.buffer()
    last = bucket.is_last()
    if state.step < state.warmup_steps:
        buf.div_(state.world_size)
        fut = dist.all_reduce(buf, group=state.process_group, async_op=True).get_future()
    else:
        fut = state.pg.allreduce_ternary(buf, state.handle(bucket)).get_future()
    if last:
        state.end_step()
    return fut.then(lambda f: f.value()[0])


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier for tern groups (torch 1.13's own
    accepts gloo groups only): rank 0 waits for every rank at most `timeout`
    (default: the group's) and raises naming the rank(s) that did not arrive;
    the others raise if rank 0 does not let them pass in time."""
    pg = tern_group(group)
    if timeout is None:
        return pg.monitored_barrier(wait_all_ranks=wait_all_ranks)
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

