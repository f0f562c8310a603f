"""One rank of a time-to-accuracy run: DDP over backend "tern" on Fashion-MNIST.

    train(rank, n, store_path, cfg) -> dict     (the test calls this directly)
    python3 train.py --rank R --nranks N --store PATH --cfg JSON --out FILE

cfg: model, variant, seed, epochs, train_n (first train_n images of a fixed
shuffle of the 60,000), test_n, batch (global, split over the ranks),
bucket_cap_mb, plus the variant's options (variants.install).  Every
variant sees the same initial weights (seed) and the same data order: the
epoch's permutation comes from (seed, epoch), rank r takes its slice of
every global batch.

Per epoch it records test accuracy (rank 0 evaluates; not timed), training
wall-clock (from a barrier to a barrier), the bytes this rank's network
interfaces sent (/proc/net/dev, everything but lo: inside a namespace that
is this host's link) and the ternary stats.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import variants  # noqa: E402
import tern.torch  # noqa: E402,F401 - registers backend "tern"
from tern.data import fashion_mnist  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set pixel statistics


def tensors(split, n):
    """Normalized float images [n,1,28,28] and labels; train is first shuffled
    with a fixed seed so a subset is a fair sample of the classes."""
    x, y = fashion_mnist(split)
    if split == "train":
        order = np.random.RandomState(0).permutation(len(x))
        x, y = x[order], y[order]
    x, y = x[:n], y[:n]
    xt = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return xt.unsqueeze(1), torch.from_numpy(y)


def tx_bytes():
    """Bytes sent by every interface but lo (this namespace's host link)."""
    total = 0
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, data = line.split(":", 1)
            if name.strip() != "lo":
                total += int(data.split()[8])
    return total


def accuracy(model, x, y, chunk=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), chunk):
            correct += (model(x[i:i + chunk]).argmax(1) == y[i:i + chunk]).sum().item()
    model.train()
    return 100.0 * correct / len(x)


def train_epoch(model, opt, sched, xtr, ytr, rank, n, batch, perm):
    """One pass; returns the last loss and each step's seconds (DDP keeps the
    ranks in step, so rank 0's are everyone's)."""
    per_rank = batch // n
    loss, steps = None, []
    for i in range(0, len(perm) - batch + 1, batch):
        t = time.perf_counter()
        idx = perm[i + rank * per_rank:i + (rank + 1) * per_rank]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        sched.step()
        steps.append(time.perf_counter() - t)
    return (float(loss) if loss is not None else float("nan")), steps


def train(rank, n, store_path, cfg):
    torch.set_num_threads(1)
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    if cfg["batch"] % n:
        raise ValueError("global batch %d does not split over %d ranks" % (cfg["batch"], n))
    xtr, ytr = tensors("train", cfg["train_n"])
    xte, yte = tensors("test", cfg["test_n"]) if rank == 0 else (None, None)
    model = DDP(models.build(cfg["model"], cfg["seed"]), bucket_cap_mb=variants.bucket_cap_mb(cfg["variant"], cfg))
    stats = variants.install(model, cfg["variant"], cfg)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.get("lr", models.LR[cfg["model"]]), momentum=0.9)
    steps = cfg["epochs"] * (len(xtr) // cfg["batch"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    out = dict(cfg, nranks=n, acc=[], time=[], tx=[], loss=[], ternary=[])
    for epoch in range(cfg["epochs"]):
        perm = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(cfg["seed"] * 1000 + epoch))
        dist.barrier()
        tx0, t0, c0 = tx_bytes(), time.perf_counter(), time.process_time()
        loss, steps = train_epoch(model, opt, sched, xtr, ytr, rank, n, cfg["batch"], perm)
        dist.barrier()
        out["time"].append(time.perf_counter() - t0)
        out.setdefault("cpu", []).append(time.process_time() - c0)  # all threads: torch, tern's
        out["tx"].append(tx_bytes() - tx0)
        out["loss"].append(loss)
        # The host is shared: bursts of other work stretch some steps.  Steps x
        # the median step is the epoch's time without them (report: "robust").
        out.setdefault("median_epoch", []).append(len(steps) * float(np.median(steps)))
        out.setdefault("load", []).append(os.getloadavg()[0])  # other work on this host skews times
        if stats:
            out["ternary"].append(dict(stats()))
        if rank == 0:
            out["acc"].append(accuracy(model.module, xte, yte))
            print("%s %s epoch %d: %.2f%% after %.1fs, loss %.3f, sent %.1f MB" % (
                cfg["model"], cfg["variant"], epoch + 1, out["acc"][-1], out["time"][-1], loss,
                out["tx"][-1] / 1e6), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--cfg", required=True, help="JSON")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    res = train(a.rank, a.nranks, a.store, json.loads(a.cfg))
    with open(a.out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
