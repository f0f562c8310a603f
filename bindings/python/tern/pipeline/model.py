"""The demo's model: an MLP of L equal layers, each owned by a global index.

Every layer is width x width (inputs are zero-padded to the width, the first
`classes` outputs of the last layer are the logits), so any layer can sit on
any stage and move between stages (the migration issue) without changing
shape.  A layer's initial weights depend only on (seed, global index), never
on the partition, so every partition starts from the same model.
"""
import math

import torch
import torch.nn.functional as F


class Layer(torch.nn.Module):
    """y = relu(x W^T + b) (no relu on the model's last layer)."""

    def __init__(self, index, width, last, seed, init=True):
        """init=False leaves the tensors uninitialised: a migration's receiver
        installs the weights from the stream before any use, and drawing the
        seeded values first would cost its compute thread time for nothing."""
        super().__init__()
        self.index, self.last = index, last
        self.weight = torch.nn.Parameter(torch.empty(width, width))
        self.bias = torch.nn.Parameter(torch.empty(width))
        if init:
            gen = torch.Generator().manual_seed(seed * 1000003 + index)
            bound = 1.0 / math.sqrt(width)  # nn.Linear's default range
            with torch.no_grad():
                self.weight.uniform_(-bound, bound, generator=gen)
                self.bias.uniform_(-bound, bound, generator=gen)

    def forward(self, x, weight=None, bias=None):
        """With weight/bias given, computes with those tensors (a stashed version)."""
        y = F.linear(x, self.weight if weight is None else weight, self.bias if bias is None else bias)
        return y if self.last else torch.relu(y)


def make_layers(indices, total, width, seed, init=True):
    """The layers with these global indices (of `total`), in order."""
    return [Layer(i, width, i == total - 1, seed, init) for i in indices]


def state_dict(layers):
    """{"layers.<global index>.<param>": tensor}: the same keys whatever the partition."""
    return {f"layers.{layer.index}.{name}": p.detach().clone()
            for layer in layers for name, p in layer.named_parameters()}


def partition_bounds(partition):
    """[(first, end)] global layer ranges of each stage for layer counts per stage."""
    bounds, start = [], 0
    for n in partition:
        bounds.append((start, start + n))
        start += n
    return bounds


def even_partition(layers, stages):
    """Layer counts per stage, as even as possible (earlier stages take the remainder)."""
    base, extra = divmod(layers, stages)
    return [base + (1 if s < extra else 0) for s in range(stages)]


def loss_of(output, labels, classes, batch_size):
    """Cross-entropy summed over the micro-batch and divided by the whole batch's
    size: the micro-batches' gradients then add up to the batch mean's."""
    return F.cross_entropy(output[:, :classes], labels, reduction="sum") / batch_size
