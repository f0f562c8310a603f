"""One rank of the priority-training benchmark: iteration time of plain DDP
over tern against tern.torch.PriorityScheduler (tic, tac, layer).

    BENCH_RANK=R python3 bench.py CFG_JSON OUT_FILE

cfg: nranks, store (a file:// rendezvous path), variants (["ddp", "tac", ...]), rounds, iters, warmup, batch (per
rank), width, hidden, lr, partition_bytes, credit_bytes, bandwidth_gbps; model ("skewed" or a torchvision
name: resnet50, vgg16), emulate (a tern.emulate source: "FWD:BWD", MODEL@DEVICE, DEVICE or a profile
file; "" computes on the host) and emulate_batch (the emulated batch per rank).
With emulate, every layer runs its real math on `batch` samples and then
waits out its device time asleep (tern.emulate): the ranks' cores stay free,
as on hosts whose accelerators compute.  Each run then also records its
overruns (ops whose real math outlasted the device time) and rank 0 writes
"ideal": the device's compute per iteration, the gradients' transfer time at
bandwidth_gbps (a ring allreduce: 2 (N-1)/N of the bytes over each link)
and their maximum, the iteration time with perfect overlap.
A variant may carry tern settings after "@" ("tac@TERN_BULK_QUEUED=0+TERN_X=1"):
it then runs on a process group of its own, whose communicator was made with
them (an A/B of an engine setting interleaved in one job).  The settings
partition_kb, credit_kb and fusion_kb are the scheduler's instead, for this
variant ("tac@partition_kb=4096+credit_kb=8192", "tac@fusion_kb=0": no fusion).
Each round runs every variant once, in turn (interleaved: the shared host's
load drifts), each from the same initial weights on the same batches of
Fashion-MNIST: `warmup` iterations, then `iters` timed ones (from a barrier
to the last update applied).  Rank 0 writes {"cfg", "runs": [{"variant",
"round", "iter_ms": [...], "seconds", "host_busy", "cpu_ms"}], "spans": one tac iteration's
allreduce and update spans, "spans_by_variant": the same for every variant
of tac ("tac@..." included), "levels": {variant: {param: level}}}.
host_busy: the share of the host's cores busy during the timed part (/proc/stat:
every rank, the kernel's network work and anything else); cpu_ms: the CPU time
of all ranks' processes (every thread) per timed iteration.  With ranks that
oversubscribe the cores (4 hosts on 2 here), a host_busy near 1 says the
iteration is bound by the CPU, where overlapping communication with compute
cannot shorten it.
"""
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as models  # noqa: E402
import tern.torch  # noqa: E402,F401 - registers backend "tern"
from tern import emulate, emulate_models  # noqa: E402
from tern.data import fashion_mnist  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set pixel statistics


def batches(rank, n, batch, count):
    """`count` batches of this rank's shard of the training set."""
    x, y = fashion_mnist("train")
    need = batch * count
    idx = np.arange(rank, len(x), n)[:need]
    xt = (torch.from_numpy(x[idx].astype(np.float32)) / 255.0 - MEAN) / STD
    yt = torch.from_numpy(y[idx])
    return [(xt[i:i + batch].unsqueeze(1), yt[i:i + batch]) for i in range(0, need, batch)]


def host_jiffies():
    """(busy, total) jiffies of every core since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v)  # idle and iowait are not busy


def own_cpu_s():
    """This process's CPU seconds (every thread: compute, tern's, torch's)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def step_plain(model, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


_groups = {}


SCHEDULER_SETTINGS = {"partition_kb": "partition_bytes", "credit_kb": "credit_bytes", "fusion_kb": "fusion_bytes"}


def split_settings(settings):
    """A variant's "@" settings: (tern's, as "K=V+K=V"; the scheduler's {cfg key: bytes})."""
    pairs = [kv.split("=", 1) for kv in settings.split("+")] if settings else []
    sched = {SCHEDULER_SETTINGS[k]: int(v) << 10 for k, v in pairs if k in SCHEDULER_SETTINGS}
    return "+".join("=".join(p) for p in pairs if p[0] not in SCHEDULER_SETTINGS), sched


def group_for(settings):
    """The process group for a variant's tern settings (None: the default
    group), made once: tern reads its settings when a communicator is made."""
    if not settings:
        return None
    if settings not in _groups:
        pairs = [kv.split("=", 1) for kv in settings.split("+")]
        saved = {k: os.environ.get(k) for k, _ in pairs}
        os.environ.update(dict(pairs))
        _groups[settings] = dist.new_group(backend="tern")
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    return _groups[settings]


def build(cfg):
    """The model, its layers on the emulated device when cfg["emulate"] names one."""
    net = models.make(cfg)
    if cfg.get("emulate"):
        inner = net[1] if isinstance(net[0], models.Rgb32) else net  # a named profile names torchvision's layers
        emulate.wrap(inner, emulate_models.source(cfg["emulate"], cfg.get("emulate_batch") or cfg["batch"]))
        net._tern_device = emulate.device_of(inner)
    return net


def overruns(net):
    device = getattr(net, "_tern_device", None)
    return device.report()["overruns"] if device else 0


def ideal(net, cfg):
    """{"compute_ms", "transfer_ms", "ideal_ms"} per iteration (module docstring), or None on the host."""
    device = getattr(net, "_tern_device", None)
    if device is None:
        return None
    compute = sum(r["fwd_ms"] + r["bwd_ms"] for r in device.report()["layers"] if r["fwd_ms"] is not None)
    n, nbytes = cfg["nranks"], sum(p.numel() * p.element_size() for p in net.parameters())
    transfer = 2 * (n - 1) / n * nbytes * 8 / (cfg["bandwidth_gbps"] * 1e9) * 1e3
    return dict(compute_ms=compute, transfer_ms=transfer, ideal_ms=max(compute, transfer), param_bytes=nbytes)


def run_variant(variant, cfg, data, record):
    """(per-iteration ms, seconds of the timed part, spans, levels, usage, ideal)."""
    variant, _, settings = variant.partition("@")
    settings, sched_cfg = split_settings(settings)
    sched_cfg = dict(cfg, **sched_cfg)
    # ddp: DDP's default 25 MB buckets; ddp-1mb: small buckets, so the first
    # ones travel during the backward
    net = build(cfg)
    model = DDP(net, bucket_cap_mb=1 if variant == "ddp-1mb" else 25, process_group=group_for(settings))
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
    sched = None
    if not variant.startswith("ddp"):
        sched = tern.torch.PriorityScheduler(
            model, opt, policy=variant, sample_batch=data[0][0], partition_bytes=sched_cfg["partition_bytes"],
            credit_bytes=sched_cfg["credit_bytes"], bandwidth_gbps=cfg["bandwidth_gbps"], record=record,
            fusion_bytes=sched_cfg.get("fusion_bytes"))

    def step(x, y):
        if sched is None:
            step_plain(model, opt, x, y)
        else:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            sched.step()
    for x, y in data[:cfg["warmup"]]:
        step(x, y)
    if sched:
        sched.synchronize()
    dist.barrier()
    busy0, total0 = host_jiffies()
    cpu0, over0 = own_cpu_s(), overruns(net)
    marks = [time.perf_counter()]
    for x, y in data[cfg["warmup"]:cfg["warmup"] + cfg["iters"]]:
        step(x, y)
        marks.append(time.perf_counter())
    if sched:
        sched.synchronize()  # the last iteration's updates belong to it
        marks[-1] = time.perf_counter()
    seconds = marks[-1] - marks[0]
    busy1, total1 = host_jiffies()
    cpu = torch.tensor([own_cpu_s() - cpu0], dtype=torch.float64)
    dist.all_reduce(cpu)  # outside the timed part: every rank's CPU time
    usage = dict(host_busy=(busy1 - busy0) / max(1, total1 - total0), cpu_ms=cpu.item() * 1e3 / cfg["iters"],
                 overruns=overruns(net) - over0)
    spans, levels = [], {}
    if sched:
        mid = cfg["warmup"] + cfg["iters"] // 2
        spans = [s for s in sched.spans() if s["iteration"] == mid]
        # the forward starts of that iteration and the next two, on the spans' clock
        spans += [dict(kind="iteration", start=m - sched.t0) for m in marks[mid - cfg["warmup"]:][:3]]
        levels = sched.levels()
        sched.close()
    return list(np.diff(marks) * 1e3), seconds, spans, levels, usage, ideal(net, cfg)


def main():
    cfg, out_path = json.loads(sys.argv[1]), sys.argv[2]
    rank, n = int(os.environ["BENCH_RANK"]), cfg["nranks"]
    torch.set_num_threads(1)
    dist.init_process_group("tern", init_method="file://" + cfg["store"], rank=rank, world_size=n)
    data = batches(rank, n, cfg["batch"], cfg["warmup"] + cfg["iters"])
    out = dict(cfg=cfg, runs=[], spans=[], spans_by_variant={}, levels={})
    for rnd in range(cfg["rounds"]):
        for v in cfg["variants"]:
            record = v.partition("@")[0] == "tac" and rnd == cfg["rounds"] - 1
            iter_ms, seconds, spans, levels, usage, out["ideal"] = run_variant(v, cfg, data, record)
            out["runs"].append(dict(variant=v, round=rnd, iter_ms=iter_ms, seconds=seconds,
                                    load=os.getloadavg()[0], **usage))
            if record:
                out["spans_by_variant"][v] = spans
                if v == "tac":
                    out["spans"] = spans
            if levels:
                out["levels"][v] = levels
            if rank == 0:
                print("round %d %-5s %.1f ms/iteration, host %.0f%% busy, %.1f ms of CPU per iteration%s" % (
                    rnd, v, seconds * 1e3 / cfg["iters"], usage["host_busy"] * 100, usage["cpu_ms"],
                    ", %d overruns (ideal %.1f ms)" % (usage["overruns"], out["ideal"]["ideal_ms"])
                    if out["ideal"] else ""), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
