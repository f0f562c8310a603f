"""The time-to-accuracy pipeline (perf/time_to_accuracy) in small: the
Fashion-MNIST loader on Debian's real idx files, and one epoch of the CNN
on 2 ranks, dense vs ternary + error feedback, through the same train()
the benchmark runs.
"""
import gzip
import os
import sys

import numpy as np
import pytest

import ranks
from tern.data import fashion_mnist, read_idx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "perf", "time_to_accuracy"))
import train as tta  # noqa: E402


def test_loader_reads_the_real_files():
    x, y = fashion_mnist("train")
    assert x.shape == (60000, 28, 28) and x.dtype == np.uint8
    assert y.shape == (60000,) and y.min() == 0 and y.max() == 9
    assert (np.bincount(y) == 6000).all()        # the training set is balanced
    xt, yt = fashion_mnist("test")
    assert xt.shape == (10000, 28, 28) and (np.bincount(yt) == 1000).all()
    assert 60 < x.mean() < 90 and x.max() == 255  # real images, not zeros


def test_loader_says_which_package_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        fashion_mnist("train", root=str(tmp_path))
    with pytest.raises(ValueError, match="split must be"):
        fashion_mnist("validation")


def test_loader_rejects_a_corrupt_file(tmp_path):
    with gzip.open(tmp_path / "t10k-labels-idx1-ubyte.gz", "wb") as f:
        f.write(b"\x00\x00\x08\x01\x00\x00\x00\x05abc")  # header says 5 labels, 3 follow
    with pytest.raises(ValueError, match="header says"):
        read_idx(str(tmp_path), "t10k-labels-idx1-ubyte", 1)
    with pytest.raises(ValueError, match="not a rank-3"):
        read_idx(str(tmp_path), "t10k-labels-idx1-ubyte", 3)


def expected_ratio(n, block):
    """dense ring bytes / ternary bytes per element (docs/TERNARY.md's formula)."""
    def w(k):
        return k.bit_length() + 1  # floor(log2 k) + 2
    payload = (sum(w(k) for k in range(1, n)) + (n - 1) * w(n)) / n
    scales = 2 * (n - 1) / n * 32 / block
    return (2 * (n - 1) / n * 32) / (payload + scales)


def test_one_epoch_ternary_within_a_few_points_of_dense(tmp_path):
    cfg = dict(model="cnn", seed=0, epochs=1, train_n=6400, test_n=2000, batch=32, block=256)
    dense = ranks.run(tta.train, 2, str(tmp_path / "d"), dict(cfg, variant="dense"), timeout=600)[0]
    tern_ = ranks.run(tta.train, 2, str(tmp_path / "t"), dict(cfg, variant="ternary-ef"), timeout=600)[0]
    print("dense %.2f%%  ternary+EF %.2f%%" % (dense["acc"][0], tern_["acc"][0]))
    assert dense["acc"][0] > 65, dense["acc"]                      # it learns in one epoch
    assert abs(dense["acc"][0] - tern_["acc"][0]) <= 3.0, (dense["acc"], tern_["acc"])
    s = tern_["ternary"][-1]
    assert s["calls"] >= 200 and s["fallbacks"] == 0, s          # every step went ternary
    ratio = s["dense_bytes"] / s["wire_bytes"]
    # Headers (16 bytes per chunk per hop) only lower the ratio, by a few percent.
    assert 0.85 * expected_ratio(2, 256) <= ratio <= expected_ratio(2, 256), (ratio, s)
