"""perf/torch_powersgd_buckets.py gloo|tern: torch's powerSGD_hook on a DDP
model split into several buckets (4 x 512x512 linear layers, bucket_cap_mb=1),
2 ranks, 8 steps, 3 trials; prints each trial's outcome per rank.  The hook's
callbacks issue their P/Q allreduces when the previous one completes, so
ranks may issue them in different orders: a backend must then fail cleanly.

  PYTHONPATH=build/python /usr/bin/python3 perf/torch_powersgd_buckets.py tern
"""
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import torch, torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP
import ranks, tern.torch

def train(rank, n, store, backend, steps=8):
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=n)
    torch.manual_seed(0)
    layers = []
    for _ in range(4): layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers, torch.nn.Linear(512, 10)), bucket_cap_mb=1)
    state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    model.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    try:
        for _ in range(steps):
            x, y = torch.randn(32, 512, generator=g), torch.randint(0, 10, (32,), generator=g)
            opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
        res = "ok"
    except Exception as e:
        res = "error: " + str(e)[:300]
    return res

b = sys.argv[1]
for trial in range(3):
    store = "/tmp/tern-psgd-store_%s_%d_%d" % (b, os.getpid(), trial)
    if os.path.exists(store): os.remove(store)
    try:
        print(b, trial, ranks.run(train, 2, store, b, timeout=120))
    except Exception as e:
        print(b, trial, "failed:", str(e)[:300])
