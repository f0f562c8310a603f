"""The Python module on numpy arrays: every collective, 2 and 3 processes,
errors as tern.Error with tern's sentence, the GIL released while waiting."""
import os
import threading
import time

import numpy as np
import pytest

import ranks
import tern

DTYPES = [np.float32, np.float64, np.int64, np.int32, np.uint8, np.float16]


def data(rank, n, dtype, count=1001):
    """Small integers, so every summation order gives the same answer."""
    rng = np.random.default_rng(1000 + rank)
    lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -3
    return rng.integers(lo, 4, count).astype(dtype)


def everyone(n, dtype, count=1001):
    return [data(r, n, dtype, count) for r in range(n)]


def collectives(rank, n, uid):
    comm = tern.Comm(uid, n, rank)
    assert (comm.rank, comm.size) == (rank, n)
    for dtype in DTYPES:
        x, all_ = data(rank, n, dtype), everyone(n, dtype)
        refs = {"sum": np.sum(all_, axis=0), "max": np.max(all_, axis=0), "min": np.min(all_, axis=0),
                "prod": np.prod(all_, axis=0)}
        for op, ref in refs.items():
            y = x.copy()
            comm.allreduce(y, op=op)
            np.testing.assert_array_equal(y, ref.astype(dtype), err_msg="%s %s" % (dtype, op))
        out = np.empty_like(x)
        comm.allreduce(x, out)  # out of place: x untouched
        np.testing.assert_array_equal(out, refs["sum"].astype(dtype))
        np.testing.assert_array_equal(x, data(rank, n, dtype))
        b = x.copy()
        comm.broadcast(b, root=n - 1)
        np.testing.assert_array_equal(b, all_[n - 1])
        r = np.zeros_like(x)
        comm.reduce(x, r, root=1, op="max")
        if rank == 1:
            np.testing.assert_array_equal(r, refs["max"].astype(dtype))
        g = np.empty(n * x.size, dtype)
        comm.allgather(x, g)
        np.testing.assert_array_equal(g, np.concatenate(all_))
        big = np.concatenate([data(rank * 10 + k, n, dtype, 333) for k in range(n)])
        part = np.empty(333, dtype)
        comm.reduce_scatter(big, part)
        want = sum(data(q * 10 + rank, n, dtype, 333) for q in range(n)).astype(dtype)
        np.testing.assert_array_equal(part, want)
    y = np.full(64, rank + 1.0)
    comm.allreduce(y, op="avg")
    np.testing.assert_allclose(y, (n + 1) / 2)
    # bfloat16: no numpy type; the raw 16-bit patterns with dtype=.
    bf = (np.full(10, 1.0 + rank, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    comm.allreduce(bf, dtype="bfloat16")
    as_f32 = (bf.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(as_f32, np.full(10, n * (n + 1) / 2, np.float32))
    # send/recv around the ring, in one group (any order, no deadlock).
    msg, got = np.full(100000, rank, np.int32), np.empty(100000, np.int32)
    with tern.group():
        comm.send(msg, (rank + 1) % n)
        comm.recv(got, (rank - 1) % n)
    assert (got == (rank - 1) % n).all()
    comm.barrier()
    # ternary: a constant vector encodes exactly, so the average is exact.
    t = np.full(4096, float(rank + 1), np.float32)
    comm.allreduce_ternary(t)
    np.testing.assert_allclose(t, (n + 1) / 2, rtol=1e-6)
    comm.set_ternary_config(error_feedback=False, min_bytes=0)
    assert comm.ternary_config()["error_feedback"] is False
    assert comm.ternary_stats()["calls"] == 1
    assert comm.peer_transport(rank) == "self"
    comm.destroy()
    return True


@pytest.mark.parametrize("n", [2, 3])
def test_every_collective_matches_numpy(n):
    assert ranks.run(collectives, n, tern.unique_id()) == [True] * n


def shared_buffers(rank, n, uid):
    comm = tern.Comm(uid, n, rank)
    count = 1 << 18  # 1 MiB of float32: above the 128 KiB where it goes one copy
    mine = np.frombuffer(tern.SharedBuffer(count * 4), np.float32)
    assert (mine == 0).all()
    mine[:] = np.arange(count, dtype=np.float32) + rank
    got = np.frombuffer(tern.SharedBuffer(count * 4), np.float32)
    with tern.group():
        comm.send(mine, (rank + 1) % n)
        comm.recv(got, (rank - 1) % n)
    np.testing.assert_array_equal(got, np.arange(count, dtype=np.float32) + (rank - 1) % n)
    b = mine.copy() if rank == 0 else np.zeros(count, np.float32)
    comm.broadcast(mine if rank == 0 else b, root=0)
    np.testing.assert_array_equal(b, np.arange(count, dtype=np.float32))
    try:
        tern.SharedBuffer(0)
    except tern.Error as e:
        msg = str(e)
    comm.destroy()
    return msg


def test_shared_buffers_move_between_ranks_and_refuse_zero_bytes():
    msgs = ranks.run(shared_buffers, 2, tern.unique_id())
    assert all("size is 0" in m for m in msgs), msgs


def from_env(rank, n, port):
    os.environ.update(TERN_RANK=str(rank), TERN_NRANKS=str(n), TERN_ROOT="127.0.0.1:%d" % port,
                      TERN_SECRET="00112233445566778899aabbccddeeff")
    comm = tern.Comm.from_env(timeout=30)  # options through the config struct here too
    x = np.ones(10)
    comm.allreduce(x)
    return float(x[0])


def test_comm_from_env():
    assert ranks.run(from_env, 2, ranks.free_port()) == [2.0, 2.0]


def errors(rank, n, uid):
    comm = tern.Comm(uid, n, rank)
    caught = []
    cases = [
        lambda: comm.allreduce(np.zeros(3, np.complex64)),             # no tern dtype
        lambda: comm.allreduce(np.zeros(3), np.zeros(4)),              # size mismatch
        lambda: comm.allreduce(np.zeros(3), op="xor"),                 # unknown op
        lambda: comm.broadcast(np.zeros(3), root=7),                   # tern's own check
        lambda: comm.allreduce(np.zeros((4, 4))[:, 1]),                # not contiguous
        lambda: comm.allreduce_ternary(np.zeros(8, np.int32)),         # ternary needs floats
        lambda: comm.send(np.zeros(2), peer=-1),
    ]
    for case in cases:
        try:
            case()
        except tern.Error as e:
            assert e.code == 4, (e.code, str(e))  # ternInvalidArgument
            assert isinstance(e, RuntimeError)
            caught.append(str(e))
    assert len(caught) == len(cases), caught
    comm.barrier()  # still usable after misuse
    comm.destroy()
    return caught


def test_misuse_raises_tern_error_with_a_sentence():
    msgs = ranks.run(errors, 2, tern.unique_id())[0]
    assert "complex" in msgs[0] or "format" in msgs[0]
    assert "recv holds 4 elements" in msgs[1]
    assert "op must be one of" in msgs[2]
    assert "root 7" in msgs[3]
    assert "contiguous" in msgs[4]
    assert "invalid argument" in msgs[5]


def dead_peer(rank, n, uid):
    os.environ["TERN_TIMEOUT"] = "20"
    comm = tern.Comm(uid, n, rank)
    comm.barrier()
    if rank == 1:
        os._exit(0)  # gone without a word, mid-job
    start = time.monotonic()
    with pytest.raises(tern.Error) as e:
        x = np.ones(1 << 20, np.float32)
        for _ in range(50):
            comm.allreduce(x)
    return time.monotonic() - start, e.value.code, str(e.value)


def test_dead_peer_raises_instead_of_hanging():
    uid = tern.unique_id()
    ctx_results = ranks.run(dead_peer, 2, uid, timeout=60)
    elapsed, code, msg = ctx_results[0]
    assert elapsed < 20, elapsed
    assert code in (6, 8), msg  # ternRemoteError or ternTimeout
    assert msg


def gil(rank, n, uid):
    comm = tern.Comm(uid, n, rank)
    if rank == 1:
        time.sleep(1.0)  # rank 0 waits in allreduce meanwhile
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    th = threading.Thread(target=count)
    th.start()
    comm.allreduce(np.ones(4))
    stop.set()
    th.join()
    comm.destroy()
    return ticks[0]


def test_the_gil_is_released_while_waiting():
    ticks = ranks.run(gil, 2, tern.unique_id())
    assert ticks[0] > 100, ticks  # ~1 s of ticking while rank 0 waited


def options(rank, n, uid):
    os.environ.pop("TERN_TIMEOUT", None)
    tern_opts = dict(seed=7, block=128, clip=2.5, error_feedback=False, min_bytes=0)
    comm = tern.Comm(uid, n, rank, timeout=2.0, ternary=tern_opts)
    got = comm.ternary_config()
    if rank == 1:
        time.sleep(6)  # alive but silent: only the timeout can tell
        return None
    start = time.monotonic()
    with pytest.raises(tern.Error) as e:
        comm.allreduce(np.ones(4))
    return got, time.monotonic() - start, e.value.code, str(e.value)


def test_options_reach_the_communicator_through_the_config():
    got, elapsed, code, msg = ranks.run(options, 2, tern.unique_id(), timeout=60)[0]
    assert got == dict(seed=7, block=128, clip=2.5, error_feedback=False, min_bytes=0), got
    assert 1.5 < elapsed < 5, elapsed  # the default timeout is 300 s
    assert code == 8, msg  # ternTimeout
    assert "TERN_TIMEOUT" not in os.environ


def test_bad_options_are_refused_with_a_sentence():
    uid = tern.unique_id()
    cases = [(dict(timeout=-1), "timeout= must be > 0 seconds, not -1"),
             (dict(timeout=0), "timeout= must be > 0 seconds, not 0"),
             (dict(ternary=dict(seed=1)), "'block' is missing"),
             (dict(ternary=dict(seed=1, block=64, clip=0, error_feedback=1, min_bytes=0, x=1)), "no option 'x'"),
             (dict(flow_classes=9), "flow classes 9"),
             (dict(dscp=[64]), "DSCP 64")]
    for kwargs, words in cases:
        with pytest.raises(tern.Error) as e:
            tern.Comm(uid, 1, 0, **kwargs)
        assert words in str(e.value), (kwargs, str(e.value))
        assert e.value.code == 4
