import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tern.torch  # registers the backend "tern"

dist.init_process_group("tern")
rank = dist.get_rank()

torch.manual_seed(0)  # DDP also broadcasts rank 0's weights at the start
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.Generator().manual_seed(rank)  # every rank its own batches

for step in range(100):
    x = torch.randn(32, 32, generator=data)
    y = x[:, :10].argmax(dim=1)  # a target the model can learn
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()  # DDP averages the gradients over the ranks through tern
    opt.step()
    if rank == 0 and step % 20 == 0:
        print(f"step {step}: loss {loss.item():.3f}")

if rank == 0:
    print(f"final loss {loss.item():.3f}")
dist.destroy_process_group()
