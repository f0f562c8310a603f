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
import torch.nn.functional as F

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


class Rgb32(nn.Module):
    """[B, 1, 28, 28] Fashion-MNIST -> [B, 3, 32, 32]: what an ImageNet model
    takes (its real layer shapes and parameter counts; the real math then
    runs on 32 x 32 images while the emulated device times are the 224 x 224
    ones of the named profile)."""

    def forward(self, x):
        return F.pad(x, (2, 2, 2, 2)).expand(-1, 3, -1, -1)


def imagenet_model(name):
    """torchvision's `name` (1000 classes: the real parameter count; Fashion-MNIST's
    labels 0-9 are ten of them) behind the Fashion-MNIST adapter."""
    from tern import emulate_models
    torch.manual_seed(0)
    return nn.Sequential(Rgb32(), emulate_models.build(name))


class Logits(nn.Module):
    """The first 10 outputs of a wide last layer are the logits."""

    def forward(self, x):
        return x[:, :10]


def vgg8(seed=0):
    """The VGG shape at 8 layers: six small ones first (on every 4x4 patch:
    little of the parameters, most of the compute), two big ones last (10.6M
    parameters, most of the bytes), the shape TicTac orders transfers for.
    profiles/vgg8.json gives its device times: 20/40 ms forward/backward for
    each small layer, 5/10 ms for each big one."""
    torch.manual_seed(seed)
    patches, small = (28 // PATCH) ** 2, []
    for i, (a, b) in enumerate([(PATCH * PATCH, 64)] + [(64, 64)] * 4 + [(64, 32)]):
        small += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(Patches(), *small, nn.Flatten(), nn.Linear(patches * 32, 4096), nn.ReLU(),
                         nn.Linear(4096, 1024), Logits())


def make(cfg):
    """The benchmark's model for cfg["model"]: "skewed" (skewed_mlp), "vgg8" or a torchvision name."""
    name = cfg.get("model", "skewed")
    if name == "skewed":
        return skewed_mlp(cfg["width"], cfg["hidden"])
    if name == "vgg8":
        return vgg8()
    return imagenet_model(name)
