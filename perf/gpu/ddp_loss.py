#!/usr/bin/env python3
"""DDP training steps and their losses, for perf/gpu/run.sh: torch.distributed
backend "nccl" on tern's NCCL shim must give the losses the real NCCL gives.

  ddp_loss.py run --world 2 --out FILE [--backend nccl] [--device cuda]
      W processes (rank r on GPU r % count), DDP over a small MLP, fixed seeds
      and data; every rank's loss per step goes to FILE (JSON).  Which
      libnccl.so.2 the process mapped is printed (the shim or the real one).
  ddp_loss.py reference --world 2 --out FILE [--device cuda:0]
      the same steps in one process without any collective: each rank's
      gradient computed in turn, divided by W and summed in rank order (what
      DDP's allreduce hook computes), then the same SGD step.  The reference
      where the real NCCL cannot run (two ranks on one GPU: NCCL refuses a
      duplicate GPU).
  ddp_loss.py compare A B
      exit 0 when every loss of A equals B's (bitwise for 2 ranks, where a
      sum of two is the same in any order; else within 1e-6 relative).

A dry run without a GPU: --backend gloo --device cpu, against reference
--device cpu.
"""
import argparse
import json
import os
import sys

STEPS, BATCH, DIM, CLASSES = 20, 32, 64, 10


def model_and_data(torch, rank, device):
    torch.manual_seed(1234)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(DIM, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, CLASSES)).to(device)
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches
    data = [(torch.randn(BATCH, DIM, generator=g).to(device),
             torch.randint(0, CLASSES, (BATCH,), generator=g).to(device)) for _ in range(STEPS)]
    return model, data


def libnccl():
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libnccl" in line}
    return ", ".join(sorted(paths)) or "no libnccl mapped"


def worker(rank, world, backend, device, port, out):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dev = torch.device("cuda", rank % torch.cuda.device_count())
    else:
        dev = torch.device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    model, data = model_and_data(torch, rank, dev)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if rank == 0:
        print(f"{backend} on {dev}: libnccl mapped: {libnccl()}", flush=True)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(losses, f)
    dist.destroy_process_group()


def run(args):
    import random
    import torch.multiprocessing as mp
    port = random.randint(20000, 40000)
    mp.spawn(worker, args=(args.world, args.backend, args.device, port, args.out),
             nprocs=args.world, join=True)
    merged = [json.load(open(f"{args.out}.{r}")) for r in range(args.world)]
    for r in range(args.world):
        os.remove(f"{args.out}.{r}")
    json.dump(merged, open(args.out, "w"))


def reference(args):
    import torch
    dev = torch.device(args.device)
    models, datas = zip(*[model_and_data(torch, r, dev) for r in range(args.world)])
    model = models[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = [[] for _ in range(args.world)]
    for step in range(STEPS):
        grads = None
        for r in range(args.world):
            model.zero_grad()
            x, y = datas[r][step]
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            losses[r].append(loss.item())
            g = [p.grad.detach() / args.world for p in model.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        for p, g in zip(model.parameters(), grads):
            p.grad = g
        opt.step()
    json.dump(losses, open(args.out, "w"))


def compare(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        print(f"different shapes: {a_path} and {b_path}")
        return 1
    worst = max(abs(u - v) / max(1.0, abs(v)) for x, y in zip(a, b) for u, v in zip(x, y))
    exact = a == b
    print(f"{len(a)} ranks x {len(a[0])} steps: losses {'bitwise equal' if exact else 'differ'}"
          f" (largest relative difference {worst:.3g}); first/last rank-0 loss "
          f"{a[0][0]:.6f} / {a[0][-1]:.6f} vs {b[0][0]:.6f} / {b[0][-1]:.6f}")
    return 0 if exact or (len(a) > 2 and worst <= 1e-6) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--world", type=int, default=2)
    r.add_argument("--backend", default="nccl")
    r.add_argument("--device", default="cuda")
    r.add_argument("--out", required=True)
    f = sub.add_parser("reference")
    f.add_argument("--world", type=int, default=2)
    f.add_argument("--device", default="cuda:0")
    f.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args()
    if args.cmd == "run":
        return run(args)
    if args.cmd == "reference":
        return reference(args)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
