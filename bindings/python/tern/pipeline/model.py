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

    def __init__(self, index, width, last, seed):
        super().__init__()
        self.index, self.last = index, last
        gen = torch.Generator().manual_seed(seed * 1000003 + index)
        bound = 1.0 / math.sqrt(width)  # nn.Linear's default range
        self.weight = torch.nn.Parameter(torch.empty(width, width).uniform_(-bound, bound, generator=gen))
        self.bias = torch.nn.Parameter(torch.empty(width).uniform_(-bound, bound, generator=gen))

    def forward(self, x, weight=None, bias=None):
        """With weight/bias given, computes with those tensors (a stashed version)."""
        y = F.linear(x, self.weight if weight is None else weight, self.bias if bias is None else bias)
        return y if self.last else torch.relu(y)


def make_layers(indices, total, width, seed):
    """The layers with these global indices (of `total`), in order."""
    return [Layer(i, width, i == total - 1, seed) for i in indices]


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
