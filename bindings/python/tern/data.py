"""Fashion-MNIST from Debian's dataset-fashion-mnist package (idx files).

    from tern.data import fashion_mnist
    x, y = fashion_mnist("train")    # uint8 (60000, 28, 28), int64 (60000,) labels 0..9
    x, y = fashion_mnist("test")     # 10000 images

Numpy only, so the perf scripts and tests need no torchvision (Debian has
none for torch 1.13).  A missing package is a FileNotFoundError that says
which package to install.
"""
import gzip
import os
import struct

import numpy as np

DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"
PACKAGE = "dataset-fashion-mnist"
_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
# idx magic: two zero bytes, the element type (0x08 = uint8), the rank.
_UBYTE = 0x08


def _open(root, name):
    """The file, gzipped (as Debian ships it) or already unpacked."""
    for path, opener in ((os.path.join(root, name + ".gz"), gzip.open),
                         (os.path.join(root, name), open)):
        if os.path.exists(path):
            return path, opener(path, "rb")
    raise FileNotFoundError(
        "Fashion-MNIST file %s(.gz) not found in %s: install Debian's %s package "
        "(apt-get install %s, or scripts/install-deps.sh)" % (name, root, PACKAGE, PACKAGE))


def read_idx(root, name, rank):
    """One idx file as a uint8 array of the given rank; the header is checked."""
    path, f = _open(root, name)
    with f:
        data = f.read()
    if len(data) < 4:
        raise ValueError("%s: too short for an idx file (%d bytes)" % (path, len(data)))
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != _UBYTE or ndim != rank:
        raise ValueError("%s: not a rank-%d uint8 idx file (magic %02x%02x %02x %02x)"
                         % (path, rank, data[0], data[1], dtype, ndim))
    if len(data) < 4 + 4 * rank:
        raise ValueError("%s: too short for a rank-%d idx header (%d bytes)" % (path, rank, len(data)))
    shape = struct.unpack(">%dI" % rank, data[4:4 + 4 * rank])
    body = np.frombuffer(data, np.uint8, offset=4 + 4 * rank)
    if body.size != int(np.prod(shape)):
        raise ValueError("%s: header says %s (%d bytes) but %d follow"
                         % (path, shape, int(np.prod(shape)), body.size))
    return body.reshape(shape)


def fashion_mnist(split="train", root=None):
    """(images uint8 [n, 28, 28], labels int64 [n]) of split "train" or "test"."""
    if split not in _FILES:
        raise ValueError("split must be 'train' or 'test', not %r" % (split,))
    root = root or os.environ.get("TERN_FASHION_MNIST", DEFAULT_ROOT)
    images_name, labels_name = _FILES[split]
    images = read_idx(root, images_name, 3)
    labels = read_idx(root, labels_name, 1).astype(np.int64)
    if len(images) != len(labels):
        raise ValueError("%s: %d images but %d labels" % (root, len(images), len(labels)))
    return images, labels
