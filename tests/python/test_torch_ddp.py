"""DDP over backend "tern": the same weights as over gloo, and the ternary
comm hook training a small MLP to within 1 point of dense accuracy.

Run as a script to print both accuracy curves:
    PYTHONPATH=build/python /usr/bin/python3 tests/python/test_torch_ddp.py
"""
import os
import sys

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ranks
import tern.torch


def small_buckets():
    """Several buckets even for these small models (DDP's first bucket is
    1 MiB by default), so bucket order and DDP's rebuild are exercised."""
    dist._DEFAULT_FIRST_BUCKET_BYTES = 8 << 10


def mlp(seed, d_in=32, hidden=64, classes=10):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, classes))


def same_weights(rank, n, store_path, backend, hook=None):
    """With a hook: one bucket (DDP's defaults), so every rank issues the
    hook's collectives between the same two bucket allreduces."""
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend, init_method="file://" + store_path, rank=rank, world_size=n)
    if hook:
        model = DDP(mlp(0))
        model.register_comm_hook(None, hook)
    else:
        small_buckets()
        model = DDP(mlp(0), bucket_cap_mb=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(6):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


@pytest.mark.parametrize("n", [2, 3])
def test_ddp_weights_equal_gloo(n, tmp_path):
    w_tern = ranks.run(same_weights, n, str(tmp_path / "a"), "tern")
    w_gloo = ranks.run(same_weights, n, str(tmp_path / "b"), "gloo")
    for r in range(n):
        torch.testing.assert_close(torch.tensor(w_tern[r]), torch.tensor(w_gloo[r]), rtol=1e-5, atol=1e-6)
    assert w_tern[0] == w_tern[n - 1]  # replicas agree exactly


def nested_hook(state, bucket):
    """Like torch's powerSGD hook: the future's callback issues collectives
    and waits on them (through a future and through Work.wait()), so it must
    not run on a thread the backend needs to complete them."""
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def average(f):
        n = torch.ones(1)
        dist.all_reduce(n, async_op=True).get_future().wait()
        check = torch.ones(1)
        dist.all_reduce(check)
        assert n.item() == check.item() == dist.get_world_size(), (n, check)
        return f.value()[0].div_(n)
    return fut.then(average)


@pytest.mark.parametrize("n", [2, 3])
def test_hook_callback_that_waits_on_collectives(n, tmp_path):
    w_tern = ranks.run(same_weights, n, str(tmp_path / "a"), "tern", nested_hook, timeout=120)
    w_gloo = ranks.run(same_weights, n, str(tmp_path / "b"), "gloo", timeout=120)
    for r in range(n):
        torch.testing.assert_close(torch.tensor(w_tern[r]), torch.tensor(w_gloo[r]), rtol=1e-5, atol=1e-6)


def task(n_train=16000, n_test=4000, d=32, classes=10, noise=0.05):
    """A teacher MLP labels Gaussian inputs; a fraction of labels is flipped,
    so accuracy tops out below 100% and differences show."""
    g = torch.Generator().manual_seed(1234)
    torch.manual_seed(4321)
    teacher = torch.nn.Linear(d, classes)  # linear classes, learnt by the MLP to ~90%
    x = torch.randn(n_train + n_test, d, generator=g)
    with torch.no_grad():
        y = teacher(x).argmax(1)
    flip = torch.rand(len(y), generator=g) < noise
    y[flip] = torch.randint(0, classes, (int(flip.sum()),), generator=g)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def train(rank, n, store_path, ternary, epochs=4, batch=32):
    torch.set_num_threads(1)
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    xtr, ytr, xte, yte = task()
    small_buckets()
    model = DDP(mlp(7), bucket_cap_mb=0.01)
    state = None
    if ternary:
        state = tern.torch.TernaryState(None, warmup_steps=20, error_feedback=True)
        model.register_comm_hook(state, tern.torch.ternary_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    steps_per_epoch = (len(xtr) // n) // batch
    # Cosine decay to zero: the last epochs settle, so one final figure is stable.
    # 4 epochs (2026-12-04, 2 ranks): dense 89.25%, ternary 89.23%; 12 epochs
    # (CI's until then, 3x the steps): 89.28% and 89.15%.
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs * steps_per_epoch)
    shard = torch.arange(rank, len(xtr), n)
    curve = []
    for epoch in range(epochs):
        perm = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch))]
        for i in range(0, len(perm) - batch + 1, batch):
            idx = perm[i:i + batch]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
            sched.step()
        with torch.no_grad():
            curve.append(100.0 * (model.module(xte).argmax(1) == yte).float().mean().item())
    info = {}
    if state:
        s = state.stats()
        info = dict(calls=s["calls"], wire=s["wire_bytes"], dense=s["dense_bytes"],
                    handles=len(state._handles), buckets=state.buckets_last_step, steps=state.step)
    dist.destroy_process_group()
    return curve, info


def curves(tmp_path, n=2):
    dense = ranks.run(train, n, str(tmp_path / "d"), False, timeout=600)[0]
    tern_ = ranks.run(train, n, str(tmp_path / "t"), True, timeout=600)[0]
    return dense, tern_


def test_ternary_hook_within_one_point_of_dense(tmp_path):
    (dense, _), (tcurve, info) = curves(tmp_path)
    print("dense  ", " ".join("%.2f" % a for a in dense))
    print("ternary", " ".join("%.2f" % a for a in tcurve))
    assert dense[-1] > 80, dense           # the task is learnable
    assert abs(dense[-1] - tcurve[-1]) <= 1.0, (dense[-1], tcurve[-1])
    assert info["calls"] > 0 and info["wire"] < info["dense"] / 4, info  # compressed
    assert info["handles"] == info["buckets"] > 1, info  # state follows DDP's rebuilt buckets


if __name__ == "__main__":
    import pathlib
    import tempfile
    (dense, _), (tcurve, info) = curves(pathlib.Path(tempfile.mkdtemp()))
    print("| epoch | dense % | ternary+EF % |\n|---|---|---|")
    for e, (a, b) in enumerate(zip(dense, tcurve)):
        print("| %d | %.2f | %.2f |" % (e + 1, a, b))
    print(info)
    sys.exit(0)
