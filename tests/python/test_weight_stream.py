"""Weight streams from Python: numpy arrays and torch tensors' numpy views,
versions whole and increasing, poll's None, wait's timeout, arrays that do
not match the stream refused with a sentence, shm and tcp."""
import os
import time

import numpy as np
import pytest

import ranks
import tern


def version_arrays(v, shapes=((1000, 37), (5,), (300001,))):
    """Every element derived from the version, per tensor and index."""
    a = (np.arange(np.prod(shapes[0]), dtype=np.float32).reshape(shapes[0]) * 3 + v) % 65521
    b = np.arange(shapes[1][0], dtype=np.int64) + v * 1000003
    c = ((np.arange(shapes[2][0]) * 7 + v * 31) % 256).astype(np.uint8)
    return [a.astype(np.float32), b, c]


def stream_versions(rank, n, uid, transport, last, flag):
    os.environ["TERN_TRANSPORT"] = transport
    comm = tern.Comm(uid, n, rank, timeout=2)
    arrays = version_arrays(-1)
    with comm.weight_stream(1 - rank, 0, arrays, priority=7) as ws:
        if rank == 0:
            for v in range(last + 1):
                ws.push(version_arrays(v), v)
            # The receiver's last wait runs into the timeout on purpose; a
            # barrier entered now would time out first (same 2 s), so wait
            # outside tern until the receiver has seen its timeout.
            deadline = time.monotonic() + 60
            while not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.01)
            comm.barrier()
            return None
        seen, v = [], -1
        while v < last:
            v = ws.wait(arrays, v + 1)
            for got, want in zip(arrays, version_arrays(v)):
                np.testing.assert_array_equal(got, want, err_msg="version %d torn" % v)
            seen.append(v)
        assert ws.poll(arrays) is None  # nothing newer
        assert ws.version == last
        with pytest.raises(tern.Error) as e:
            ws.wait(arrays, last + 1)  # nothing comes: the comm's timeout, with a sentence
        assert "TERN_TIMEOUT" in str(e.value) and e.value.code == 8
        open(flag, "w").close()
        comm.barrier()
        return seen


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_versions_whole_and_increasing(transport, tmp_path):
    last = 20
    seen = ranks.run(stream_versions, 2, tern.unique_id(), transport, last, str(tmp_path / "timed-out"))[1]
    assert seen[-1] == last and seen == sorted(set(seen))


def torch_and_errors(rank, n, uid):
    torch = pytest.importorskip("torch")
    comm = tern.Comm(uid, n, rank)
    w = [torch.zeros(64, 32), torch.zeros(32, dtype=torch.float64)]
    views = [t.numpy() for t in w]
    ws = comm.weight_stream(1 - rank, 1, [(64 * 32, "float32"), (32, "float64")])
    if rank == 1:
        w[0].fill_(2.5)
        w[1].fill_(-1)
        ws.push(views, 3)
        with pytest.raises(tern.Error, match="versions must increase"):
            ws.push(views, 3)
        with pytest.raises(tern.Error, match="does not match"):
            ws.push([np.zeros(10, np.float32), views[1]], 4)
        with pytest.raises(tern.Error, match="only the receiver"):
            ws.poll(views)
    else:
        assert ws.wait(views, 3) == 3
        assert float(w[0][7, 7]) == 2.5 and float(w[1][31]) == -1.0  # the tensors themselves
        with pytest.raises(tern.Error, match="carries 2 tensors"):
            ws.poll(views[:1])
    ws.close()
    with pytest.raises(tern.Error, match="closed"):
        ws.close()
    with pytest.raises(tern.Error, match="oneself"):
        comm.weight_stream(rank, 0, [(4, "float32")])
    return True


def test_torch_tensors_and_refusals():
    assert ranks.run(torch_and_errors, 2, tern.unique_id()) == [True, True]
