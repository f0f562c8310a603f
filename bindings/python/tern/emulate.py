"""tern.emulate: an emulated accelerator for torch modules.

    import tern.emulate as emulate
    model = emulate.wrap(model, emulate.uniform(20, 40))      # every layer: 20 ms forward, 40 ms backward
    model = emulate.wrap(model, emulate.profile("prof.json"))  # per layer, from a profile
    model = emulate.wrap(model, emulate.roofline("v100", batch=64))  # from each layer's FLOPs and bytes
    ...train as usual...
    print(emulate.report(model))   # ops, device time, real time, overruns per layer

Each wrapped layer runs its real math on the host, then waits out the rest
of a device time without holding a core (time.sleep: the GIL is released,
nothing spins), as the host thread of a job on an accelerator waits for
its kernel.  Communication, the scheduler's threads and the other ranks
then have the host's cores to themselves, which is what decides overlap
and scheduling results on a real machine; CPU math on 2 shared cores does
not.  What is emulated: the layers' compute time.  What is real: the math
(the loss and the gradients are the unwrapped module's, bit for bit), the
bytes, the network and tern.

The device is serial, as one stream is: a layer's forward starts when the
host calls it (after everything before it waited out its time) and ends
`fwd` later; its backward starts when the gradient of its output arrives
and ends `bwd` later.  A gradient is handed on, to the layer below and to
the parameters' accumulators (where DDP's and PriorityScheduler's hooks
start the allreduces), only once the backward's device time has passed, as
on a device a gradient exists only when its kernel has finished.

An op whose real math takes longer than its device time is an *overrun*:
it ends when the math does, and it is counted (report()), never hidden;
results about overlap are trustworthy only where overruns are few.

Layers: by default the leaf modules that own parameters (Linear, Conv,
norms); parameterless ones (activations, pooling) count as fused into
their neighbours.  `layers=` names others.

Device times:
- uniform(fwd_ms, bwd_ms) or parse_ms("FWD:BWD"): every layer the same.
- profile(path or dict): {"layers": [{"name", "fwd_ms", "bwd_ms",
  optional "activation_bytes", "gradient_bytes"}]}, matched to the
  wrapped layers by name, else by position when the counts agree.
- roofline(device, batch=None, dtype="fp32", efficiency=1.0, real_batch=None):
  per layer max(FLOPs / peak, bytes / bandwidth) / efficiency at
  DEVICES[device], FLOPs and bytes counted from each call's real shapes,
  its batch dimension scaled to `batch` (the emulated batch: the real math
  may run on fewer samples).  With `real_batch` (the real batch that
  stands for `batch`), a call of fewer rows, a pipeline's micro-batch, is
  that share of the emulated batch; the weights are still read once per
  call, so small calls cost more per sample, as on a device.
"""
import dataclasses
import json
import threading
import time

import torch

# Peak dense rates per device: (FLOP/s by dtype, memory bytes/s).  Vendor data
# sheets (SXM parts): V100 15.7 TFLOP/s fp32 / 125 fp16 tensor, 900 GB/s HBM2;
# A100 80 GB 19.5 fp32 / 156 tf32 / 312 fp16, 2039 GB/s; H100 67 fp32 /
# 495 tf32 / 989 fp16 (dense), 3350 GB/s.
DEVICES = {
    "v100": {"fp32": 15.7e12, "tf32": 15.7e12, "fp16": 125e12, "bytes_per_s": 900e9},
    "a100": {"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bytes_per_s": 2039e9},
    "h100": {"fp32": 67e12, "tf32": 495e12, "fp16": 989e12, "bytes_per_s": 3350e9},
}
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2}


@dataclasses.dataclass
class LayerTime:
    """One layer's device time per call, in seconds, and what it puts on the wire."""
    fwd_s: float
    bwd_s: float
    activation_bytes: int = 0
    gradient_bytes: int = 0


# ---- where device times come from -----------------------------------------------------

class uniform:
    """Every layer `fwd_ms` forward, `bwd_ms` backward per call; with
    `samples`, those times are for that many samples and a call's scale with
    its batch dimension (a device's time grows with the work: a pipeline's
    micro-batches of different sizes)."""

    def __init__(self, fwd_ms, bwd_ms, samples=None):
        if not (fwd_ms >= 0 and bwd_ms >= 0):
            raise ValueError(f"device times must be >= 0 ms, not {fwd_ms}:{bwd_ms}.")
        if samples is not None and not samples >= 1:
            raise ValueError(f"the samples the device times are for must be at least 1, not {samples}.")
        self.fwd_ms, self.bwd_ms, self.samples = float(fwd_ms), float(bwd_ms), samples

    def bind(self, names):
        return None

    def time_of(self, index, name, module, inputs, output):
        scale = 1.0
        if self.samples:
            x = next((t for t in inputs if torch.is_tensor(t) and t.dim()), None)
            scale = (x.shape[0] if x is not None else self.samples) / self.samples
        return LayerTime(self.fwd_ms * scale / 1e3, self.bwd_ms * scale / 1e3)


def parse_ms(text):
    """"FWD:BWD" or "FWD:BWD@SAMPLES" (milliseconds per call, or per SAMPLES
    samples) as a uniform source; ValueError with a sentence otherwise."""
    times, at, samples = text.partition("@")
    try:
        fwd, bwd = (float(v) for v in times.split(":"))
        count = int(samples) if at else None
    except ValueError:
        raise ValueError(f"device times must look like FWD:BWD or FWD:BWD@SAMPLES in milliseconds (e.g. 20:40), "
                         f"not {text!r}.") from None
    return uniform(fwd, bwd, count)


class profile:
    """Per-layer device times from a profile (a JSON file's path or its dict)."""

    def __init__(self, source):
        if isinstance(source, dict):
            data = source
        else:
            with open(source) as f:
                data = json.load(f)
        rows = data.get("layers") if isinstance(data, dict) else None
        if not rows or not all(isinstance(r, dict) and "fwd_ms" in r and "bwd_ms" in r for r in rows):
            raise ValueError("a device profile is {\"layers\": [{\"name\", \"fwd_ms\", \"bwd_ms\"}, ...]} "
                             "with at least one layer.")
        self.data, self.rows = data, rows
        self._by_name = None

    def bind(self, names):
        """Checks that the wrapped layers `names` have rows: by name, or else
        one row per layer in order.  A module's layers may be bound in
        several calls (a pipeline stage adopting migrated layers): by name."""
        by_name = {r.get("name"): r for r in self.rows}
        if all(n in by_name for n in names):
            self._by_name = by_name
        elif len(self.rows) == len(names) and self._by_name is None:
            self._by_name = dict(zip(names, self.rows))
        else:
            raise ValueError(f"the profile has {len(self.rows)} layers and names {len(by_name)} of them, but the "
                             f"module has {len(names)} layers to emulate ({', '.join(names[:4])}, ...): "
                             "match them by name or give one row per layer, in order.")

    def time_of(self, index, name, module, inputs, output):
        r = self._by_name[name]
        return LayerTime(r["fwd_ms"] / 1e3, r["bwd_ms"] / 1e3, int(r.get("activation_bytes", 0)),
                         int(r.get("gradient_bytes", 0)))


class roofline:
    """Device times from each layer's FLOPs and bytes at a device's peak rates."""

    def __init__(self, device, batch=None, dtype="fp32", efficiency=1.0, real_batch=None):
        if device not in DEVICES:
            raise ValueError(f"unknown device {device!r}; known: {', '.join(sorted(DEVICES))} (tern.emulate.DEVICES).")
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, not {dtype!r}.")
        if not 0 < efficiency <= 1:
            raise ValueError(f"efficiency is the share of the peak reached, in (0, 1], not {efficiency}.")
        if batch is not None and batch < 1:
            raise ValueError(f"the emulated batch must be at least 1, not {batch}.")
        if real_batch is not None and not (batch and real_batch >= 1):
            raise ValueError(f"a real batch ({real_batch}) needs an emulated batch and must be at least 1.")
        self.device, self.batch, self.dtype, self.efficiency = device, batch, dtype, efficiency
        self.real_batch = real_batch

    def bind(self, names):
        return None

    def time_of(self, index, name, module, inputs, output):
        x = next((t for t in inputs if torch.is_tensor(t)), None)
        if x is None or not torch.is_tensor(output):
            raise ValueError(f"roofline: layer {name} must take and return a tensor.")
        scale = 1.0
        if self.batch and x.dim():
            scale = self.batch / (self.real_batch or x.shape[0])
        fwd_flops, param_elems = layer_flops(module, x, output)
        fwd_flops *= scale
        elem = DTYPE_BYTES[self.dtype]
        act_bytes = (x.numel() + output.numel()) * scale * elem
        fwd_bytes = act_bytes + param_elems * elem
        # Backward: the input's gradient and the weights' (twice the forward's
        # products), reading and writing about twice the forward's bytes.
        rate = DEVICES[self.device]
        fwd_s = max(fwd_flops / rate[self.dtype], fwd_bytes / rate["bytes_per_s"]) / self.efficiency
        bwd_s = max(2 * fwd_flops / rate[self.dtype], 2 * fwd_bytes / rate["bytes_per_s"]) / self.efficiency
        return LayerTime(fwd_s, bwd_s, int(output.numel() * scale * 4), int(x.numel() * scale * 4))


def layer_flops(module, x, y):
    """(forward FLOPs of this call, parameter elements) from the real shapes:
    a multiply-add is 2 FLOPs; Linear and ConvNd exactly, anything else
    one FLOP per output element (elementwise, norms)."""
    params = sum(p.numel() for p in module.parameters(recurse=False))
    if isinstance(module, torch.nn.Linear):
        return 2.0 * (x.numel() // module.in_features) * module.in_features * module.out_features, params
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        kernel = 1
        for k in module.kernel_size:
            kernel *= k
        return 2.0 * y.numel() * (module.in_channels // module.groups) * kernel, params
    return float(y.numel()), params


# ---- the emulated device --------------------------------------------------------------

class _Layer:
    """A wrapped layer's device time and counters."""

    def __init__(self, index, name, module, source, device):
        self.index, self.name, self.module, self.source, self.device = index, name, module, source, device
        self.time = None  # LayerTime of the latest call (a call's time depends on its shapes)
        self.calls = self.backwards = self.fwd_overruns = self.bwd_overruns = 0
        self.real_fwd_s = self.real_bwd_s = self.device_s = 0.0
        self.current = None  # the _Op whose backward ran last (the parameters' hooks wait on it)


class _Op:
    """One call of a layer: its backward's deadline."""

    def __init__(self, layer, scale):
        self.layer, self.scale = layer, scale
        self.time = None  # this call's LayerTime
        self.started = self.deadline = None
        self.waited = False

    def start_backward(self):
        self.started = time.monotonic()
        self.deadline = self.started + self.time.bwd_s * self.scale
        self.waited = False
        self.layer.current = self

    def wait_backward(self):
        """At every place the backward's results leave the layer: sleep until
        its device time has passed (the first one checks for an overrun)."""
        if self.deadline is None:
            return
        now = time.monotonic()
        if not self.waited:
            self.waited = True
            layer = self.layer
            layer.backwards += 1
            layer.real_bwd_s += now - self.started
            layer.device_s += self.time.bwd_s * self.scale
            if now > self.deadline:
                layer.bwd_overruns += 1
        if self.deadline > now:
            time.sleep(self.deadline - now)


class _BackwardStarts(torch.autograd.Function):
    """At a layer's output: the gradient's arrival starts its backward.  A
    copy, not a view: the next module may modify it in place (ReLU's
    inplace=True after a norm), which autograd forbids on a Function's view."""

    @staticmethod
    def forward(ctx, op, y):
        ctx.op = op
        return y.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.op.start_backward()
        return None, grad


class _BackwardEnds(torch.autograd.Function):
    """At a layer's inputs: their gradients leave once the device time has passed.
    `token` requires grad, so this runs even when no input does (a first layer)."""

    @staticmethod
    def forward(ctx, op, token, *xs):
        ctx.op = op
        return tuple(x.view_as(x) for x in xs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.op.wait_backward()
        return (None, None) + grads


class Device:
    """The emulated accelerator behind one wrapped module: its layers, the
    time scale (a slowed device: `scale` multiplies every device time), and
    the counters report() reads."""

    def __init__(self, source):
        self.source, self.scale, self.layers = source, 1.0, []
        self._handles, self._lock = [], threading.Lock()

    def _call(self, layer, forward, args, kwargs):
        op = _Op(layer, self.scale)
        tensor_at = [i for i, a in enumerate(args) if torch.is_tensor(a) and a.is_floating_point()]
        if torch.is_grad_enabled() and tensor_at:
            token = torch.zeros((), requires_grad=True)
            gated = _BackwardEnds.apply(op, token, *(args[i] for i in tensor_at))
            args = list(args)
            for i, g in zip(tensor_at, gated):
                args[i] = g
        start = time.monotonic()
        out = forward(*args, **kwargs)
        op.time = layer.time = self.source.time_of(layer.index, layer.name, layer.module, args, out)
        now = time.monotonic()
        deadline = start + op.time.fwd_s * op.scale
        with self._lock:
            layer.calls += 1
            layer.real_fwd_s += now - start
            layer.device_s += op.time.fwd_s * op.scale
            if now > deadline:
                layer.fwd_overruns += 1
        if deadline > now:
            time.sleep(deadline - now)
        if torch.is_tensor(out) and out.requires_grad and tensor_at:
            out = _BackwardStarts.apply(op, out)
        return out

    def _param_hook(self, layer):
        """Before a parameter's gradient is accumulated (and DDP's or the
        scheduler's hook on the accumulator starts its allreduce)."""
        def hook(grad):
            if layer.current is not None:
                layer.current.wait_backward()
            return grad
        return hook

    def attach(self, named):
        names = [n for n, _ in named]
        self.source.bind(names)
        for index, (name, module) in enumerate(named):
            layer = _Layer(index, name, module, self.source, self)
            self.layers.append(layer)
            forward = module.forward
            module.forward = lambda *a, _l=layer, _f=forward, **k: self._call(_l, _f, a, k)
            self._handles.append((module, forward))
            for p in module.parameters(recurse=False):
                if p.requires_grad:
                    self._handles.append(p.register_hook(self._param_hook(layer)))

    def detach(self):
        for h in self._handles:
            if isinstance(h, tuple):
                module, forward = h
                del module.forward  # the class's forward again
            else:
                h.remove()
        self._handles = []

    def report(self):
        rows = []
        for layer in self.layers:
            t = layer.time
            rows.append({"name": layer.name, "calls": layer.calls, "backwards": layer.backwards,
                         "fwd_ms": t.fwd_s * 1e3 if t else None, "bwd_ms": t.bwd_s * 1e3 if t else None,
                         "device_ms": layer.device_s * 1e3,
                         "real_fwd_ms": layer.real_fwd_s * 1e3 / max(layer.calls, 1),
                         "real_bwd_ms": layer.real_bwd_s * 1e3 / max(layer.backwards, 1),
                         "fwd_overruns": layer.fwd_overruns, "bwd_overruns": layer.bwd_overruns})
        ops = sum(r["calls"] + r["backwards"] for r in rows)
        overruns = sum(r["fwd_overruns"] + r["bwd_overruns"] for r in rows)
        return {"ops": ops, "overruns": overruns, "device_ms": sum(r["device_ms"] for r in rows), "layers": rows}


def default_layers(module):
    """The leaf modules that own parameters, with their qualified names."""
    out = [(n, m) for n, m in module.named_modules()
           if not list(m.children()) and any(True for _ in m.parameters(recurse=False))]
    if not out:
        raise ValueError("tern.emulate.wrap: the module has no leaf module with parameters to emulate; "
                         "name the layers with layers=[...].")
    return out


def wrap(module, source, layers=None):
    """Emulates `module`'s layers (default: default_layers) on a device whose
    times come from `source`; returns the module (wrapped in place).
    layers: modules of `module` (or (name, module) pairs) to emulate instead."""
    if getattr(module, "_tern_emulated", None) is not None:
        raise ValueError("tern.emulate.wrap: this module is already emulated (tern.emulate.unwrap first).")
    if layers is None:
        named = default_layers(module)
    else:
        names = {id(m): n for n, m in module.named_modules()}
        named = [l if isinstance(l, tuple) else (names.get(id(l), str(i)), l) for i, l in enumerate(layers)]
    device = Device(source)
    device.attach(named)
    module._tern_emulated = device
    return module


def device_of(module):
    device = getattr(module, "_tern_emulated", None)
    if device is None:
        raise ValueError("this module is not emulated (tern.emulate.wrap).")
    return device


def report(module):
    """{"ops", "overruns", "device_ms" (the device's busy time, all calls),
    "layers": [{"name", "calls", "backwards", "fwd_ms", "bwd_ms" (the latest
    call's device times: they follow its shapes), "device_ms", "real_fwd_ms",
    "real_bwd_ms" (the math's mean), "fwd_overruns", "bwd_overruns"}]}."""
    return device_of(module).report()


def unwrap(module):
    """Restores the module's own forwards and removes the hooks."""
    device_of(module).detach()
    module._tern_emulated = None
    return module
