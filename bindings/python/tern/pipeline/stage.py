"""One pipeline stage's computation: its layers (each with its global index),
forward and backward of one micro-batch, the optimizer, and the weight
versions each backward used.

Flush (synchronous kFkB): every micro-batch of a batch computes with the live
weights; gradients accumulate in .grad in ascending micro-batch order and one
SGD step per batch applies them.

Async (PipeDream 1F1B with weight stashing): each forward computes with a
stashed copy of the weights as they are then (version v), and the same
micro-batch's backward differentiates through that copy, so it uses version
v even though later backwards have updated the live weights meanwhile; the
gradient is applied to the live weights right after the backward.  With
`stash=False` the backward recomputes the micro-batch with the weights live
at backward time instead (what PipeDream does without stashing): the check
below then sees the mismatch.

The check (weight_versions_ok): at every backward, the version of the
weights it differentiated through must be the version its forward used,
and their checksum must be the one recorded at the forward (nothing
modified them in between).
"""
import time

import torch

from .. import emulate, emulate_models
from .model import loss_of


class Weights:
    """A set of weight tensors with the version they hold, for these layers
    (a live migration changes which layers a micro-batch runs through)."""

    def __init__(self, version, tensors, layers):
        self.version, self.tensors, self.layers = version, tensors, layers

    def checksum(self):
        with torch.no_grad():
            return sum(float(t.double().sum()) + float(t.double().abs().sum()) for t in self.tensors)


class Stage:
    def __init__(self, index, stages, layers, cfg, log):
        self.index, self.stages, self.layers, self.cfg, self.log = index, stages, layers, cfg, log
        self.first, self.last = index == 0, index == stages - 1
        self.version = 0            # optimizer steps applied to the live weights
        self.inflight = {}          # micro-batch key -> what its backward needs
        self.version_checks = []    # (key, forward version, backward version, same checksum)
        self.loss_sum = 0.0
        self.device = _device(cfg)  # the emulated accelerator, or None (compute on the host)
        self.adopt(layers)

    def adopt(self, layers):
        """Layers that this stage computes from now on (its own, or arriving in
        a migration) run on its emulated device, if it has one."""
        if self.device is not None:
            self.device.attach([(f"layer{layer.index}", layer) for layer in layers])

    def overruns(self):
        """Ops whose real math outlasted their emulated device time (0 without a device)."""
        return self.device.report()["overruns"] if self.device is not None else 0

    def params(self, layers=None):
        return [p for layer in (self.layers if layers is None else layers) for p in (layer.weight, layer.bias)]

    # ---- forward / backward ----

    def forward(self, key, iteration, micro, x, labels=None, layers=None):
        """Runs the stage (or `layers`, during a live migration) on micro-batch
        x; returns what goes to the next stage (None at the last stage, whose
        output is the loss)."""
        start, cpu = time.monotonic(), time.thread_time()
        self._set_scale(iteration)
        weights = self._forward_weights(self.layers if layers is None else layers)
        x = x.detach().requires_grad_(not self.first)
        out = self._run(x, weights)
        if self.last:
            out = loss_of(out, labels, self.cfg.classes, self.cfg.batch)
            self.loss_sum += float(out)
        checksum = weights.checksum() if self.cfg.schedule == "async" else None
        self.inflight[key] = (x, out, weights, weights.version, checksum, labels)
        cpu = time.thread_time() - cpu + self._slow_down(start, iteration)
        self.log.add(iteration, micro, "fwd", start, time.monotonic(), cpu=cpu, version=weights.version,
                     samples=len(x), layers=[layer.index for layer in weights.layers])
        return None if self.last else out.detach()

    def backward(self, key, iteration, micro, grad=None):
        """Back-propagates micro-batch `key`; returns the gradient for the
        previous stage (None at the first)."""
        start, cpu = time.monotonic(), time.thread_time()
        x, out, weights, fwd_version, checksum, labels = self.inflight.pop(key)
        if self.cfg.schedule == "async" and not self.cfg.stash:
            weights = self._snapshot(weights.layers)  # no stashing: whatever is live now
            x = x.detach().requires_grad_(not self.first)
            out = self._run(x, weights)
            if self.last:
                out = loss_of(out, labels, self.cfg.classes, self.cfg.batch)
        torch.autograd.backward(out, None if self.last else grad)
        same = checksum is None or weights.checksum() == checksum
        self.version_checks.append((key, fwd_version, weights.version, same))
        if self.cfg.schedule == "async":
            self._apply(weights)
        cpu = time.thread_time() - cpu + self._slow_down(start, iteration)
        self.log.add(iteration, micro, "bwd", start, time.monotonic(), cpu=cpu, version=weights.version,
                     forward_version=fwd_version, samples=len(x), layers=[layer.index for layer in weights.layers])
        return None if self.first else x.grad

    def step(self, iteration):
        """Flush: one SGD step with the batch's accumulated gradients."""
        start = time.monotonic()
        with torch.no_grad():
            for p in self.params():
                p.add_(p.grad, alpha=-self.cfg.lr)
                p.grad = None
        self.version += 1
        self.log.add(iteration, -1, "opt", start, time.monotonic(), version=self.version)

    def weight_versions_ok(self):
        return all(fv == bv and same for _, fv, bv, same in self.version_checks) and not self.inflight

    def time_compute(self, size, repeats=7, clock=time.perf_counter):
        """(forward ms, backward ms) of one micro-batch of `size` samples, the
        fastest of `repeats` (on a shared host other work only ever adds
        time), on a throw-away copy of the weights (nothing logged, nothing
        updated), stretched by --slow-stage like the real ops.  `clock`:
        time.thread_time counts the CPU the op takes (stages that share
        cores), wall time what it lasts (a device of its own)."""
        weights = self._snapshot(self.layers)
        slow = self.cfg.slow_factor(self.index, 0)  # as the first batch will run
        if self.device is not None:  # the device itself runs `slow` times slower
            self._set_scale(0)
            slow = 1.0
        fwd, bwd = [], []
        for _ in range(repeats + 1):  # the first is a warm-up
            x = torch.zeros(size, self.cfg.width, requires_grad=not self.first)
            t0 = clock()
            out = self._run(x, weights)
            t1 = clock()
            out.backward(torch.ones_like(out))
            t2 = clock()
            fwd.append((t1 - t0) * 1e3 * slow)
            bwd.append((t2 - t1) * 1e3 * slow)
        return min(fwd[1:]), min(bwd[1:])

    # ---- helpers ----

    def _forward_weights(self, layers):
        if self.cfg.schedule == "async":
            return self._snapshot(layers)
        return Weights(self.version, self.params(layers), layers)

    def _snapshot(self, layers):
        """A stashed copy of the live weights (leaves that collect their own gradients)."""
        return Weights(self.version, [p.detach().clone().requires_grad_() for p in self.params(layers)], layers)

    def _run(self, x, weights):
        t = weights.tensors
        for j, layer in enumerate(weights.layers):
            x = layer(x, t[2 * j], t[2 * j + 1])
        return x

    def _apply(self, weights):
        """Async: the backward's gradient, computed at the stashed version, updates the live weights."""
        with torch.no_grad():
            for p, w in zip(self.params(weights.layers), weights.tensors):
                p.add_(w.grad, alpha=-self.cfg.lr)
        self.version += 1

    def _set_scale(self, iteration):
        """--slow-stage on an emulated device: its device times, multiplied."""
        if self.device is not None:
            self.device.scale = self.cfg.slow_factor(self.index, iteration)

    def _slow_down(self, start, iteration):
        """--slow-stage without an emulated device: stretch this op to `slow`
        times its measured compute time (in the batches the slowdown lasts);
        returns the seconds added.  They count in the op's `cpu` too: the
        emulated slower device is busy for them (though, asleep, it leaves
        the host's cores to the other stages).  With a device, its scale
        does it (_set_scale)."""
        slow = self.cfg.slow_factor(self.index, iteration)
        if slow == 1.0 or self.device is not None:
            return 0.0
        extra = (slow - 1.0) * (time.monotonic() - start)
        time.sleep(extra)
        return extra


def _device(cfg):
    """The emulated device of a stage for the run's --emulate-ms or
    --emulate-profile (every stage the same: a layer's device time is its
    own wherever it runs, so it moves with a migrated layer), or None."""
    if cfg.emulate_ms:
        return emulate.Device(emulate.uniform(*cfg.emulate_ms))
    if cfg.emulate_profile:
        return emulate.Device(emulate_models.source(cfg.emulate_profile, cfg.emulate_batch or cfg.batch,
                                                    groups=cfg.layers, real_batch=cfg.batch))
    return None
