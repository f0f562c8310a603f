#!/usr/bin/python3
"""allreduce_check.py PYTHONPATH SLOTS: one tern rank under mpirun (tern-k8s local).

Bootstraps from OpenMPI's environment and the -x variables only (the rsh agent gives each rank a fresh
environment, as sshd does), checks that tern sees the pods as separate hosts (shared
memory only with the ranks of its own worker, mpirun placing SLOTS ranks per worker
by slot) and that a dense allreduce is exact.  Prints one "ok" line per rank; any
failure is a sentence and exit code 1."""
import os
import re
import socket
import sys

sys.path.insert(0, sys.argv[1])
import numpy as np  # noqa: E402
import tern  # noqa: E402


def main():
    slots = int(sys.argv[2])
    # What reaches a rank is what the launcher line forwards with -x, nothing else:
    # the test sets TERN_K8S_TEST_LEAK around tern-k8s to see that nothing leaks.
    if not re.fullmatch(r"[0-9a-f]{32}", os.environ.get("TERN_SECRET", "")):
        sys.exit("TERN_SECRET did not reach the rank as 32 hex digits (mpirun -x TERN_SECRET)")
    if "TERN_ROOT" not in os.environ or "TERN_K8S_TEST_LEAK" in os.environ:
        sys.exit("the rank's environment is not the one mpirun forwards (TERN_ROOT missing, "
                 "or the launcher's environment leaked through the rsh agent)")
    comm = tern.Comm.from_env()
    rank, size = comm.rank, comm.size
    for p in range(size):
        got = comm.peer_transport(p)
        same = p // slots == rank // slots
        if (p == rank and got != "self") or (p != rank and same != (got == "shm")):
            sys.exit("rank %d: transport to rank %d is %s, but rank %d is %s worker" %
                     (rank, p, got, p, "on the same" if same else "on another"))
    n = 100003
    x = (np.arange(n) % 11).astype(np.float32) + rank
    comm.allreduce(x)
    want = size * (np.arange(n) % 11).astype(np.float32) + size * (size - 1) / 2
    if not np.array_equal(x, want):
        bad = int(np.flatnonzero(x != want)[0])
        sys.exit("rank %d: allreduce element %d is %g, want %g" % (rank, bad, x[bad], want[bad]))
    comm.destroy()
    print("rank %d of %d on %s: allreduce ok" % (rank, size, socket.gethostname()), flush=True)


if __name__ == "__main__":
    main()
