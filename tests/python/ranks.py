"""Runs a test function as N real processes (fork) and collects what each
returns.  A rank that raises, dies or outlives the deadline fails the test:
nothing hangs."""
import multiprocessing
import os
import queue
import socket
import time
import traceback


def _child(fn, rank, n, q, args):
    code = 0
    try:
        q.put((rank, True, fn(rank, n, *args)))
    except BaseException:  # noqa: B902 - report everything to the parent
        q.put((rank, False, traceback.format_exc()))
        code = 1
    q.close()
    q.join_thread()
    os._exit(code)  # skip atexit handlers inherited from pytest


def run(fn, n, *args, timeout=120):
    """fn(rank, n, *args) in n processes; returns the list of results by rank."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, n, q, args)) for r in range(n)]
    for p in procs:
        p.start()
    results, errors, failed = {}, [], set()
    deadline = time.monotonic() + timeout
    try:
        while len(results) + len(errors) < n:
            if time.monotonic() > deadline:
                raise AssertionError("ranks timed out after %ss: %s done" % (timeout, sorted(results)))
            try:
                rank, ok, value = q.get(timeout=0.2)
            except queue.Empty:
                # A rank that ended without reporting: exit 0 counts as a
                # result of None (a test may exit a rank on purpose).
                for r, p in enumerate(procs):
                    if p.exitcode is None or r in results or r in failed:
                        continue
                    time.sleep(0.2)  # its report may still be in the pipe
                    if not q.empty():
                        break
                    if p.exitcode == 0:
                        results[r] = None
                    else:
                        failed.add(r)
                        errors.append("rank %d died (exit %s)" % (r, p.exitcode))
                continue
            if ok:
                results[rank] = value
            else:
                failed.add(rank)
                errors.append("rank %d:\n%s" % (rank, value))
    finally:
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise AssertionError("\n".join(errors))
    return [results[r] for r in range(n)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
