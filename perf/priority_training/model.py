"""The benchmark's model: an MLP on Fashion-MNIST with seed 004's skew.

The first layers are small and run on every 4x4 patch (49 per image), so
they hold ~4% of the parameters but most of the compute; the last layers
are wide fully-connected ones holding the rest.  That is the shape of
VGG-style CNNs (convolutions first, big dense layers last) for which
TicTac orders the transfers: the first layers' few bytes are what the next
forward needs first, the last layers' many bytes can arrive during it.
"""
import torch
from torch import nn

PATCH = 4


class Patches(nn.Module):
    """[B, 1, 28, 28] -> [B, 49, 16]: the image's 4x4 patches."""

    def forward(self, x):
        b = x.shape[0]
        p = x.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH)  # B,1,7,7,4,4
        return p.reshape(b, -1, PATCH * PATCH)


def skewed_mlp(width=256, hidden=2048, seed=0):
    torch.manual_seed(seed)
    patches = (28 // PATCH) ** 2
    return nn.Sequential(
        Patches(), nn.Linear(PATCH * PATCH, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, 32), nn.ReLU(), nn.Flatten(),
        nn.Linear(patches * 32, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, 10))
