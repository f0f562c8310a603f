"""Named device profiles for tern.emulate: "MODEL@DEVICE[:DTYPE]", e.g.
"resnet50@v100" or "vgg16@h100:fp16".

The model is torchvision's definition (its real layer shapes and parameter
counts; nothing is downloaded), the device times are tern.emulate's
roofline of each layer at ImageNet's 224 x 224 input and the emulated
batch.  The shapes are traced on torch's "meta" device, so making a
profile costs no compute.

    rows = profile_rows("resnet50@v100", batch=64)      # [{"name", "fwd_ms", "bwd_ms", "params", ...}]
    emulate.wrap(model, emulate.profile({"layers": rows}))
"""
import torch

from . import emulate

IMAGE = (3, 224, 224)  # the models' ImageNet input


def models():
    """{name: constructor} of the models a profile may name."""
    import torchvision.models as tv
    return {"resnet50": tv.resnet50, "vgg16": tv.vgg16, "resnet18": tv.resnet18, "vgg11": tv.vgg11}


def parse(spec):
    """"MODEL@DEVICE[:DTYPE]" as (model, device, dtype); ValueError with a sentence otherwise."""
    model, at, rest = spec.partition("@")
    device, _, dtype = rest.partition(":")
    known = models()
    if not at or model not in known or device not in emulate.DEVICES:
        raise ValueError(f"a named profile is MODEL@DEVICE[:DTYPE] with MODEL one of {', '.join(sorted(known))} "
                         f"and DEVICE one of {', '.join(sorted(emulate.DEVICES))}, not {spec!r}.")
    return model, device, dtype or "fp32"


def build(model):
    """The torchvision model, randomly initialised (the real shapes)."""
    return models()[model](weights=None)


def profile_rows(spec, batch=32, efficiency=1.0):
    """Per layer of the named model (tern.emulate.default_layers, by qualified
    name): the roofline's forward and backward ms at `batch`, its parameters,
    and the bytes of its output activation and input gradient (float32)."""
    model, device, dtype = parse(spec)
    net = build(model).to("meta")
    source = emulate.roofline(device, batch, dtype, efficiency)
    rows, hooks = [], []
    for name, layer in emulate.default_layers(net):
        def hook(module, inputs, output, name=name):
            t = source.time_of(len(rows), name, module, inputs, output)
            rows.append({"name": name, "fwd_ms": t.fwd_s * 1e3, "bwd_ms": t.bwd_s * 1e3,
                         "params": sum(p.numel() for p in module.parameters(recurse=False)),
                         "activation_bytes": t.activation_bytes, "gradient_bytes": t.gradient_bytes})
        hooks.append(layer.register_forward_hook(hook))
    with torch.no_grad():
        net(torch.empty((1,) + IMAGE, device="meta"))
    for h in hooks:
        h.remove()
    return rows


def grouped(rows, groups):
    """The profile's layers summed into `groups` consecutive groups of nearly
    equal counts (earlier groups take the remainder), named layer0, layer1,
    ...: a named model's device times spread over a model of `groups`
    layers (the pipeline demo's, whose stages name their layers so)."""
    if not 1 <= groups <= len(rows):
        raise ValueError(f"cannot spread a profile of {len(rows)} layers over {groups} layers.")
    base, extra = divmod(len(rows), groups)
    out, start = [], 0
    for g in range(groups):
        part = rows[start:start + base + (1 if g < extra else 0)]
        start += len(part)
        out.append({"name": f"layer{g}", "fwd_ms": sum(r["fwd_ms"] for r in part),
                    "bwd_ms": sum(r["bwd_ms"] for r in part), "params": sum(r["params"] for r in part),
                    "activation_bytes": part[-1]["activation_bytes"], "gradient_bytes": part[0]["gradient_bytes"],
                    "layers": [r["name"] for r in part]})
    return out


class named:
    """A named profile (MODEL@DEVICE[:DTYPE]) at each call's share of the
    emulated batch: a call of `rows` real rows stands for rows * batch /
    real_batch emulated samples (a pipeline's micro-batch), and its times
    are the named model's roofline at that many samples.  The weights are
    read once per call whatever its size, so small micro-batches cost more
    per sample, as on a device.  groups: as source()."""

    def __init__(self, spec, batch, real_batch, groups=None):
        parse(spec)
        if not (batch >= 1 and real_batch >= 1):
            raise ValueError(f"the emulated ({batch}) and real ({real_batch}) batches must be at least 1.")
        self.spec, self.batch, self.real_batch, self.groups = spec, batch, real_batch, groups
        self._at_samples = {}  # emulated samples -> emulate.profile, made on first use
        self._bound = []       # every bind()'s names, replayed on each new profile

    def _profile(self, samples):
        if samples not in self._at_samples:
            rows = profile_rows(self.spec, samples)
            made = emulate.profile({"layers": grouped(rows, self.groups) if self.groups else rows})
            for names in self._bound:
                made.bind(names)
            self._at_samples[samples] = made
        return self._at_samples[samples]

    def bind(self, names):
        self._profile(self.batch)  # at least one profile to check the names against
        for made in self._at_samples.values():
            made.bind(names)  # raises with a sentence where the layers do not match
        self._bound.append(list(names))

    def time_of(self, index, name, module, inputs, output):
        x = next((t for t in inputs if torch.is_tensor(t) and t.dim()), None)
        rows = x.shape[0] if x is not None else self.real_batch
        samples = max(1, round(rows * self.batch / self.real_batch))
        return self._profile(samples).time_of(index, name, module, inputs, output)


def source(spec, batch=None, groups=None, real_batch=None):
    """A device-time source from a flag: "FWD:BWD" (ms per layer), a named
    profile MODEL@DEVICE[:DTYPE] (at `batch`, default 32), a profile JSON
    file, or DEVICE[:DTYPE] (the roofline of the module's own layers at
    `batch`).  groups: spread a named profile over that many layers.
    real_batch: the real batch that stands for `batch`; a call of fewer
    rows (a pipeline's micro-batch) then gets its share's device time, not
    the whole batch's."""
    if "@" in spec:
        if real_batch:
            return named(spec, batch or 32, real_batch, groups)
        rows = profile_rows(spec, batch or 32)
        return emulate.profile({"layers": grouped(rows, groups) if groups else rows})
    head, _, dtype = spec.partition(":")
    if head in emulate.DEVICES:
        return emulate.roofline(head, batch, dtype or "fp32", real_batch=real_batch if batch else None)
    if ":" in spec and not spec.endswith(".json"):
        return emulate.parse_ms(spec)
    return emulate.profile(spec)
