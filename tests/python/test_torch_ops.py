"""The c10d backend "tern": every op, float32/float64/int64/bfloat16, 2 and 3
processes, against the gloo backend on the same inputs in the same run.
Where gloo cannot do an op (AVG, reduce_scatter, bfloat16 in places) the
reference is computed locally from every rank's inputs, and the test says so
in its result instead of skipping."""
import datetime
import functools
import os
import threading
import time

import pytest
import torch
import torch.distributed as dist

import ranks
import tern.torch  # noqa: F401 - registers "tern"

DTYPES = [torch.float32, torch.float64, torch.int64, torch.bfloat16]
R = dist.ReduceOp


def inputs(rank, dtype, count=513):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randint(-3, 4, (count,), generator=g).to(dtype)


def init(rank, n, store_path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank, world_size=n)
    return dist.new_group(backend="tern")


class Compare:
    """Runs one op through both groups; falls back to a local reference
    where gloo raises."""

    def __init__(self, tern_pg, n):
        self.tern, self.n, self.local = tern_pg, n, []

    def check(self, name, fn, reference=None):
        got = fn(self.tern)
        try:
            want = fn(None)  # the default group: gloo
        except RuntimeError:
            assert reference is not None, name + ": gloo cannot and there is no reference"
            want = reference()
            self.local.append(name)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), "%s:\n tern %s\n want %s" % (name, g, w)


def all_inputs(n, dtype, count=513):
    return [inputs(r, dtype, count) for r in range(n)]


def ops(rank, n, store_path):
    tg = init(rank, n, store_path)
    c = Compare(tg, n)
    for dt in DTYPES:
        x = inputs(rank, dt)
        every = torch.stack(all_inputs(n, dt))
        refs = {"SUM": lambda: every.sum(0), "PRODUCT": lambda: every.double().prod(0),
                "MIN": lambda: every.min(0).values, "MAX": lambda: every.max(0).values}
        if not dt.is_floating_point:
            refs.update(BAND=lambda: functools.reduce(torch.bitwise_and, every),
                        BOR=lambda: functools.reduce(torch.bitwise_or, every),
                        BXOR=lambda: functools.reduce(torch.bitwise_xor, every))
        for name, ref in refs.items():
            def allreduce(g, op=getattr(R, name)):
                t = x.clone()
                dist.all_reduce(t, op=op, group=g)
                return [t]
            c.check("all_reduce %s %s" % (dt, name), allreduce, lambda ref=ref: [ref().to(dt)])
        if dt.is_floating_point:
            def avg(g):
                t = x.clone()
                dist.all_reduce(t, op=R.AVG, group=g)
                return [t]
            c.check("all_reduce %s AVG" % dt, avg, lambda: [(every.to(torch.float64).sum(0) / n).to(dt)])

        def coalesced(g):
            ts = [x[:100].clone(), x[100:].clone().view(-1, 1)]
            dist.all_reduce_coalesced(ts, group=g)
            return ts
        c.check("all_reduce_coalesced %s" % dt, coalesced,
                lambda: [every[:, :100].sum(0), every[:, 100:].sum(0).view(-1, 1)])

        def broadcast(g):
            t = x.clone()
            dist.broadcast(t, src=n - 1, group=g)
            return [t]
        c.check("broadcast %s" % dt, broadcast, lambda: [every[n - 1]])

        def reduce(g):
            t = x.clone()
            dist.reduce(t, dst=1, op=R.MAX, group=g)
            return [t] if rank == 1 else []
        c.check("reduce %s" % dt, reduce, lambda: [every.max(0).values] if rank == 1 else [])

        def all_gather(g):
            out = [torch.empty_like(x) for _ in range(n)]
            dist.all_gather(out, x, group=g)
            return out
        c.check("all_gather %s" % dt, all_gather, lambda: list(every))

        def all_gather_base(g):
            out = torch.empty(n * x.numel(), dtype=dt)
            dist._all_gather_base(out, x, group=g)
            return [out]
        c.check("_all_gather_base %s" % dt, all_gather_base, lambda: [every.reshape(-1)])

        chunks = [inputs(rank * 10 + k, dt, 77) for k in range(n)]
        mine = lambda: [sum(inputs(q * 10 + rank, dt, 77) for q in range(n))]  # noqa: E731

        def reduce_scatter(g):
            out = torch.empty(77, dtype=dt)
            dist.reduce_scatter(out, [t.clone() for t in chunks], group=g)
            return [out]
        c.check("reduce_scatter %s" % dt, reduce_scatter, mine)

        def reduce_scatter_base(g):
            out = torch.empty(77, dtype=dt)
            dist._reduce_scatter_base(out, torch.cat(chunks), group=g)
            return [out]
        c.check("_reduce_scatter_base %s" % dt, reduce_scatter_base, mine)

        def all_to_all(g):
            out = torch.empty(4 * n, dtype=dt)
            dist.all_to_all_single(out, x[:4 * n].clone(), group=g)
            return [out]
        c.check("all_to_all_single %s" % dt, all_to_all,
                lambda: [torch.cat([every[q, 4 * rank:4 * rank + 4] for q in range(n)])])

        splits_in = [(rank + q) % 3 + 1 for q in range(n)]          # what I send to q
        splits_out = [(q + rank) % 3 + 1 for q in range(n)]         # what q sends me

        def all_to_all_uneven(g):
            out = torch.empty(sum(splits_out), dtype=dt)
            dist.all_to_all_single(out, x[:sum(splits_in)].clone(), splits_out, splits_in, group=g)
            return [out]

        def uneven_ref():
            parts = []
            for q in range(n):
                sq = [(q + p) % 3 + 1 for p in range(n)]
                off = sum(sq[:rank])
                parts.append(every[q, off:off + sq[rank]])
            return [torch.cat(parts)]
        c.check("all_to_all_single uneven %s" % dt, all_to_all_uneven, uneven_ref)

        def gather(g):
            out = [torch.empty_like(x) for _ in range(n)] if rank == n - 1 else None
            dist.gather(x, out, dst=n - 1, group=g)
            return out or []
        c.check("gather %s" % dt, gather, lambda: list(every) if rank == n - 1 else [])

        def scatter(g):
            out = torch.empty(77, dtype=dt)
            dist.scatter(out, [t.clone() for t in chunks] if rank == 1 else None, src=1, group=g)
            return [out]
        c.check("scatter %s" % dt, scatter, lambda: [inputs(10 + rank, dt, 77)])

        def all_gather_coalesced(g):
            ins = [x[:10].clone(), x[10:40].clone().view(5, 6)]
            outs = [[torch.empty_like(t) for t in ins] for _ in range(n)]
            dist.all_gather_coalesced(outs, ins, group=g)
            return [t for lst in outs for t in lst]
        c.check("all_gather_coalesced %s" % dt, all_gather_coalesced,
                lambda: [t for q in range(n) for t in (every[q, :10], every[q, 10:40].view(5, 6))])

        def all_to_all_list(g):  # block sizes differ per pair
            outs = [torch.empty(splits_out[q], dtype=dt) for q in range(n)]
            dist.all_to_all(outs, list(x[:sum(splits_in)].clone().split(splits_in)), group=g)
            return outs
        c.check("all_to_all %s" % dt, all_to_all_list, lambda: list(uneven_ref()[0].split(splits_out)))

        def send_recv(g):
            got = torch.empty_like(x)
            if rank == 0:
                dist.send(x, dst=1, group=g)
                return []
            if rank == 1:
                dist.recv(got, src=0, group=g)
                return [got]
            return []
        c.check("send/recv %s" % dt, send_recv, lambda: [every[0]] if rank == 1 else [])
    sparse(rank, n, c)
    dist.barrier(group=tg)
    return c.local


def sparse(rank, n, c):
    """Sparse sum: rank r holds rows 0..r (overlapping), with a dense dim."""
    def make(r):
        idx = torch.arange(r + 1).view(1, -1)
        return torch.sparse_coo_tensor(idx, torch.full((r + 1, 3), float(r + 1)), (n + 1, 3))

    def allreduce(g):
        t = make(rank)
        dist.all_reduce(t, group=g)
        assert t.is_sparse
        return [t.to_dense()]
    c.check("sparse all_reduce", allreduce, lambda: [sum(make(r) for r in range(n)).to_dense()])


@pytest.mark.parametrize("n", [2, 3])
def test_every_op_matches_gloo(n, tmp_path):
    local = ranks.run(ops, n, str(tmp_path / "store"), timeout=300)[0]
    # Only what gloo 1.13 lacks may use the local reference.
    for name in local:
        assert any(k in name for k in ("AVG", "reduce_scatter", "bfloat16", "_all_gather_base",
                                       "all_to_all torch")), name  # gloo: all_to_all_single only


def async_op(rank, n, store_path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    if rank == 1:
        time.sleep(1.0)
    t = torch.full((1 << 16,), float(rank + 1))
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    returned = time.monotonic() - start
    done_at_once = work.is_completed()
    fut = work.get_future()
    value = fut.wait()[0]
    work.wait()
    dist.destroy_process_group()
    return returned, done_at_once, float(value[0]), float(t[-1])


def test_async_op_returns_at_once_and_its_future_completes(tmp_path):
    res = ranks.run(async_op, 2, str(tmp_path / "store"))
    returned, done_at_once, fut_value, tensor_value = res[0]
    assert returned < 0.2, returned       # rank 1 joins ~1 s later
    assert not done_at_once
    assert fut_value == 3.0 and tensor_value == 3.0


def torchrun_env(rank, n, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(n), LOCAL_RANK=str(rank))
    dist.init_process_group("tern")  # env:// as torchrun sets it up
    t = torch.ones(3)
    dist.all_reduce(t)
    name = dist.get_backend()
    dist.destroy_process_group()
    return name, t.tolist()


def test_init_from_torchrun_style_env():
    res = ranks.run(torchrun_env, 2, ranks.free_port())
    assert res == [("tern", [2.0, 2.0, 2.0])] * 2


def bad_input(rank, n, store_path):
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    msgs = []
    for bad in (lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16)),
                lambda: dist.all_reduce(torch.zeros(4, 4)[:, 0]),
                lambda: dist.all_reduce(torch.zeros(3), op=R.PREMUL_SUM if hasattr(R, "PREMUL_SUM") else 99),
                lambda: dist.all_reduce(torch.zeros(3), op=R.BAND)):
        try:
            bad()
            msgs.append(None)
        except (RuntimeError, ValueError, TypeError, AttributeError) as e:
            msgs.append(str(e))
    t = torch.ones(2)
    dist.all_reduce(t)  # the group still works
    dist.destroy_process_group()
    return msgs, t.tolist()


def test_bad_input_raises(tmp_path):
    msgs, after = ranks.run(bad_input, 2, str(tmp_path / "store"))[0]
    assert all(m for m in msgs), msgs
    assert "dtype" in msgs[0]
    assert "contiguous" in msgs[1]
    assert "integer" in msgs[3]
    assert after == [2.0, 2.0]


def dead_peer(rank, n, store_path):
    os.environ["TERN_TIMEOUT"] = "20"
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    dist.barrier()
    if rank == 1:
        os._exit(0)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        for _ in range(50):
            dist.all_reduce(torch.ones(1 << 20))
    return time.monotonic() - start, str(e.value)


def test_dead_peer_raises_runtime_error(tmp_path):
    elapsed, msg = ranks.run(dead_peer, 2, str(tmp_path / "store"), timeout=60)[0]
    assert elapsed < 20, elapsed
    assert "tern" in msg, msg


def spawned(rank, n, store_path, out_dir):
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    t = torch.full((5,), float(rank))
    dist.all_reduce(t, op=R.MAX)
    with open(os.path.join(out_dir, str(rank)), "w") as f:
        f.write("%s %g" % (dist.get_backend(), t[0].item()))
    dist.destroy_process_group()


def test_init_under_mp_spawn(tmp_path):
    import torch.multiprocessing as mp
    mp.spawn(spawned, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    assert [(tmp_path / str(r)).read_text() for r in range(2)] == ["tern 1"] * 2


def stalled_peer(rank, n, store_path):
    import datetime
    os.environ.pop("TERN_TIMEOUT", None)
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=3))
    if rank == 1:
        time.sleep(8)  # alive but silent: only the timeout can tell
        return None
    start = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        dist.all_reduce(torch.ones(4))
    return time.monotonic() - start, str(e.value)


def test_c10d_timeout_bounds_a_stalled_peer(tmp_path):
    elapsed, msg = ranks.run(stalled_peer, 2, str(tmp_path / "store"), timeout=60)[0]
    assert 2.5 < elapsed < 7, elapsed
    assert "timeout" in msg.lower() or "timed out" in msg.lower(), msg


def exchange(rank, n, store_path):
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    big = torch.full((16 << 20,), float(rank))  # 64 MiB, 16x the fifo
    right, left = (rank + 1) % n, (rank - 1) % n
    results = []
    for delay in (0.0, 0.02):  # irecv right away, and after some "compute"
        got = torch.empty_like(big)
        send = dist.isend(big, right)
        time.sleep(delay)
        recv = dist.irecv(got, left)
        send.wait()
        recv.wait()
        results.append(float(got[-1]))
    ops = [dist.P2POp(dist.isend, big, right), dist.P2POp(dist.irecv, got, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    results.append(float(got[0]))
    small = torch.zeros(3)  # posted and only polled: the engine progresses it without a wait
    w = dist.irecv(small, left) if rank % 2 else dist.isend(torch.ones(3), right)
    if n % 2 == 0:
        deadline = time.monotonic() + 10
        while not w.is_completed() and time.monotonic() < deadline:
            time.sleep(0.005)
        results.append(w.is_completed())
    dist.destroy_process_group()
    return results


@pytest.mark.parametrize("n", [2, 3])
def test_isend_irecv_larger_than_the_fifo_do_not_deadlock(n, tmp_path):
    res = ranks.run(exchange, n, str(tmp_path / "store"), timeout=120)
    for rank, r in enumerate(res):
        left = float((rank - 1) % n)
        assert r[:3] == [left] * 3, (rank, r)
        if n % 2 == 0:
            assert r[3] is True


def overtake(rank, n, store_path):
    import tern
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    bulk_t = torch.full((64 << 20,), float(rank + 1))  # 256 MiB, as in perf/priority_perf
    urgent_t = torch.full((1024,), float(10 * (rank + 1)))
    dist.barrier()  # both ranks issue at about the same time
    start = time.monotonic()
    tern.set_priority(7)
    bulk = dist.all_reduce(bulk_t, async_op=True)
    tern.set_priority(0)
    urgent = dist.all_reduce(urgent_t, async_op=True)
    urgent.wait()
    urgent_s = time.monotonic() - start
    bulk_done_then = bulk.is_completed()
    bulk.wait()
    bulk_s = time.monotonic() - start
    level = tern.get_priority()
    tern.set_priority(tern.PRIORITY_DEFAULT)
    dist.destroy_process_group()
    return (bulk_done_then, urgent_s, bulk_s, float(urgent_t[0]), float(bulk_t[0]),
            float(bulk_t[-1]), level)


def test_urgent_op_overtakes_a_bulk_one_issued_before_it(tmp_path):
    """Priority from torch: each op goes at the calling thread's tern level."""
    res = ranks.run(overtake, 2, str(tmp_path / "store"), timeout=120)
    for bulk_done_then, urgent_s, bulk_s, urgent, bulk_first, bulk_last, level in res:
        # is_completed() may lag the engine a little, never lead it: the
        # times tell that the bulk op really was still running.
        assert bulk_done_then is False
        assert urgent_s < bulk_s / 2, (urgent_s, bulk_s)
        assert urgent == 30.0 and bulk_first == bulk_last == 3.0
        assert level == 0


def futures_by_level(rank, n, store_path):
    """Rank 0 issues a bulk allreduce, then an urgent one, and records the
    order in which their futures' callbacks run.  Rank 1 issues the urgent
    one first and the bulk one only a second after its urgent one is done,
    so on rank 0 the bulk op cannot complete before that second is over."""
    import tern
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    order, t0 = [], time.monotonic()
    urgent_t, bulk_t = torch.ones(64), torch.ones(1024)

    def mark(name):
        return lambda fut: order.append((name, time.monotonic() - t0))

    if rank == 0:
        tern.set_priority(7)
        bulk = dist.all_reduce(bulk_t, async_op=True)
        tern.set_priority(0)
        urgent = dist.all_reduce(urgent_t, async_op=True)
        bulk.get_future().then(mark("bulk"))
        urgent.get_future().then(mark("urgent"))
        urgent.get_future().wait()
        bulk.get_future().wait()
    else:
        tern.set_priority(0)
        dist.all_reduce(urgent_t)
        time.sleep(1.0)
        tern.set_priority(7)
        dist.all_reduce(bulk_t)
    deadline = time.monotonic() + 10
    while rank == 0 and len(order) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    tern.set_priority(tern.PRIORITY_DEFAULT)
    dist.destroy_process_group()
    return order


def test_an_urgent_future_completes_before_an_earlier_bulk_one(tmp_path):
    """The backend completes futures per level: an urgent op's future does
    not wait for bulk ops issued before it (it did when futures completed in
    issue order, which deadlocked a ByteScheduler-style credit limit)."""
    order = ranks.run(futures_by_level, 2, str(tmp_path / "store"), timeout=120)[0]
    assert [name for name, _ in order] == ["urgent", "bulk"], order
    assert order[1][1] - order[0][1] > 0.5, order  # the urgent one did not wait for the bulk one


def bad_priority(rank, n):
    import tern
    with pytest.raises(RuntimeError) as e:
        tern.set_priority(8)
    return str(e.value), tern.get_priority()


def test_bad_priority_is_refused_with_a_sentence():
    msg, level = bad_priority(0, 1)
    assert "0 = most urgent" in msg and "8" in msg, msg
    assert level == 4


def short_wait_then_destroy(rank, n, store_path):
    import datetime
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    if rank == 1:
        time.sleep(1.5)
    t = torch.full((8,), float(rank + 1))
    work = dist.all_reduce(t, async_op=True)
    msg = None
    if rank == 0:
        with pytest.raises(RuntimeError) as e:
            work.wait(timeout=datetime.timedelta(milliseconds=200))
        msg = str(e.value)
    fut = work.get_future()
    last = torch.full((4,), float(rank))
    dist.all_reduce(last, async_op=True)  # never waited on: destroy settles it
    dist.destroy_process_group()
    return msg, fut.done(), float(t[0]), float(last[0])


def test_wait_with_a_timeout_and_destroy_with_ops_outstanding(tmp_path):
    res = ranks.run(short_wait_then_destroy, 2, str(tmp_path / "store"), timeout=60)
    assert "Timed out waiting 200 ms" in res[0][0], res[0][0]
    for msg, done, value, last in res:
        assert done and value == 3.0 and last == 1.0


def monitored(rank, n, store_path):
    import datetime
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=3))
    tern.torch.monitored_barrier(timeout=datetime.timedelta(seconds=20))  # everyone comes
    if rank == 1:
        time.sleep(1.5)
    with pytest.raises(RuntimeError) as e:
        tern.torch.monitored_barrier(timeout=datetime.timedelta(milliseconds=500), wait_all_ranks=True)
    if rank == 0:
        time.sleep(3)  # rank 1's own 500 ms run out (it starts ~1.5 s late) before rank 0 leaves
    dist.destroy_process_group()
    return str(e.value)


def test_monitored_barrier_names_the_late_rank(tmp_path):
    res = ranks.run(monitored, 2, str(tmp_path / "store"), timeout=60)
    assert "Rank 1 failed to pass monitoredBarrier in 500 ms" in res[0], res[0]
    assert "Rank 1 timed out in monitoredBarrier" in res[1], res[1]


def any_source(rank, n, store_path):
    """Rank 0 receives from anyone: twice through irecv + Work._source_rank(),
    once through recv's return value; the last rank sends two messages."""
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n)
    got = []
    if rank == 0:
        for k in range(n):
            t = torch.zeros(1000)
            if k < n - 1:
                w = dist.irecv(t)
                w.wait()
                sender = w._source_rank()
            else:
                sender = dist.recv(t)
            got.append((sender, float(t[0]), float(t[-1])))
    else:
        time.sleep(0.1 * (n - rank))  # the highest rank sends first
        dist.send(torch.full((1000,), float(rank)), dst=0)
        if rank == n - 1:
            dist.send(torch.full((1000,), 10.0 * rank), dst=0)
    dist.barrier()
    dist.destroy_process_group()
    return got


def test_recv_from_any_source_names_the_sender(tmp_path):
    got = ranks.run(any_source, 3, str(tmp_path / "store"), timeout=60)[0]
    assert sorted(g[0] for g in got) == [1, 2, 2], got
    for sender, first, last in got:
        assert first == last and first in (sender, 10.0 * sender), got
    assert [g[1] for g in got if g[0] == 2] == [2.0, 20.0], got  # one sender's messages keep their order


def lone_barrier(rank, n, store_path):
    import datetime
    dist.init_process_group("tern", init_method="file://" + store_path, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=1))
    if rank == 1:
        time.sleep(3)  # never calls the barrier; stays until rank 0 has timed out
        return None
    start = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        dist.barrier()
    return str(e.value), time.monotonic() - start


def test_timeout_is_a_runtime_error_worded_like_c10d(tmp_path):
    msg, waited = ranks.run(lone_barrier, 2, str(tmp_path / "store"), timeout=60)[0]
    assert msg.startswith("tern: Timed out waiting for barrier to complete: "), msg
    assert "waiting on rank(s) 1" in msg, msg
    assert waited >= 0.9, waited  # the group's timeout, not before


def last_reference_in_a_callback(rank, n, store_path):
    """The process group's last reference goes in a future callback, which runs
    on the group's completer thread: the group is destroyed there (it used to
    join that thread from itself: std::terminate, the rank aborted)."""
    store = dist.FileStore(store_path, n)
    pg = tern.torch._create(store, rank, n, datetime.timedelta(seconds=30))
    if rank == 1:
        time.sleep(0.5)  # rank 0's future completes later, on the completer thread
    fut = pg.allreduce([torch.ones(1024)]).get_future()
    holder, ran_on = [pg], []

    def drop(f):
        holder.clear()
        ran_on.append(threading.get_ident())
        return f.value()

    chained = fut.then(drop)
    del pg
    value = chained.wait()[0]
    return ran_on[0] != threading.get_ident(), float(value[0])


def test_the_group_may_die_in_its_own_future_callback(tmp_path):
    res = ranks.run(last_reference_in_a_callback, 2, str(tmp_path / "store"))
    assert res[0][0], "rank 0's callback ran on the calling thread: the case was not exercised"
    assert [r[1] for r in res] == [2.0, 2.0]
