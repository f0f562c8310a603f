"""The demo's batches: sklearn's digits or Debian's Fashion-MNIST, inputs
zero-padded to the model's width, the same batch for iteration i on every
stage and in the single-process reference (a seeded permutation)."""
import numpy as np
import torch


def load(name):
    """(features float32 [n, d] in 0..1, labels int64 [n])."""
    if name == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError as e:
            raise RuntimeError("--data digits needs Debian's python3-sklearn (scripts/install-deps.sh)") from e
        d = load_digits()
        return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    if name == "fashion":
        from ..data import fashion_mnist
        x, y = fashion_mnist("train")
        return (x.reshape(len(x), -1) / 255.0).astype(np.float32), y
    raise ValueError(f"--data must be digits or fashion, not {name!r}.")


class Batches:
    def __init__(self, name, batch, width, seed):
        x, y = load(name)
        if x.shape[1] > width:
            raise ValueError(f"--width {width} is smaller than the {x.shape[1]} input features of {name}.")
        if batch > len(x):
            raise ValueError(f"--batch {batch} is larger than the {len(x)} samples of {name}.")
        padded = np.zeros((len(x), width), np.float32)
        padded[:, :x.shape[1]] = x
        self.x, self.y, self.batch = torch.from_numpy(padded), torch.from_numpy(y), batch
        self.order = np.random.RandomState(seed).permutation(len(x))
        self.per_epoch = len(x) // batch

    def get(self, iteration):
        """(inputs [batch, width], labels [batch]) of iteration `iteration`."""
        j = iteration % self.per_epoch
        idx = torch.from_numpy(self.order[j * self.batch:(j + 1) * self.batch])
        return self.x[idx], self.y[idx]
