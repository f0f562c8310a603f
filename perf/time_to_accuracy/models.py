"""The two models of the time-to-accuracy study, both for 28x28 Fashion-MNIST.

cnn: small and compute-bound (~0.2 M parameters, convolutions dominate the
     step); communication is a small part of its time even at 1 Gbit/s.
mlp: 784-2048-2048-10 (5.8 M parameters, 23 MB of float32 gradients per
     step): wide enough that at 1 Gbit/s the allreduce dominates the step.
"""
import torch
from torch import nn


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def mlp(hidden=2048):
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))


MODELS = {"cnn": cnn, "mlp": mlp}
# SGD with momentum 0.9, cosine decay; the learning rate each model trains
# best with at global batch 32 (dense), the same for every variant.
LR = {"cnn": 0.02, "mlp": 0.02}


def build(name, seed):
    """The model with weights drawn from `seed` (the same on every rank)."""
    if name not in MODELS:
        raise ValueError("model must be one of %s, not %r" % (sorted(MODELS), name))
    torch.manual_seed(seed)
    return MODELS[name]()


def parameters(name):
    return sum(p.numel() for p in build(name, 0).parameters())
