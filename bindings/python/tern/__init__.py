"""tern: NCCL-style collectives for CPU processes, from Python.

    import numpy as np, tern
    comm = tern.Comm.from_env()          # ternrun / mpirun / srun / torchrun variables
                                         # options: timeout=, flow_classes=, dscp=, ternary=
    x = np.ones(1 << 20, np.float32)
    comm.allreduce(x)                    # in place; recv= for out of place
    comm.allreduce_ternary(x)            # compressed, unbiased (op="avg" by default)

Buffers are anything with the buffer protocol (numpy arrays, bytearray,
memoryview), C-contiguous.  Failures raise tern.Error (a RuntimeError) whose
message is tern's own sentence; .code is the ternResult_t.  Calls release
the GIL while they wait.  tern.set_priority(level) sets the calling thread's
priority level (0 most urgent ... 7 bulk) for its later calls, the c10d
backend's included.  `import tern.torch` registers the c10d backend.

Weight streams (versions of a set of arrays from one rank to another, moved
in the background at a priority level, 7 = bulk by default):

    ws = comm.weight_stream(peer, sender, [w1, w2], priority=7)  # arrays, or (count, "float32")
    ws.push([w1, w2], version)           # sender: snapshot and return at once
    v = ws.poll([w1, w2])                # receiver: newest complete version copied in, or None
    v = ws.wait([w1, w2], min_version)   # receiver: blocks (at most the comm's timeout)
    ws.close()                           # both ends; also `with comm.weight_stream(...) as ws:`

Torch tensors go through their numpy views (t.numpy(), CPU, contiguous).

Host memory the ranks of one host map from each other (ternMemAlloc): a large
send/recv, all-to-all, gather or scatter, or a 2-rank broadcast or allgather,
out of it is one copy instead of two, and a 2-rank reduce's root, or each
rank of a 2-rank reduce-scatter, reduces straight out of it:

    x = np.frombuffer(tern.SharedBuffer(n * 4), np.float32)   # or torch.frombuffer(..., dtype=)
"""
import contextlib

from ._tern import (PRIORITY_DEFAULT, PRIORITY_LEVELS, Comm, Error, SharedBuffer, WeightStream,
                    get_priority, group_end, group_start, set_priority, unique_id, version)

__all__ = ["Comm", "Error", "SharedBuffer", "WeightStream", "unique_id", "version", "group", "set_priority", "get_priority",
           "PRIORITY_LEVELS", "PRIORITY_DEFAULT"]


@contextlib.contextmanager
def group():
    """Calls inside run as one group (ternGroupStart/End): send/recv pairs
    in any order, without deadlock."""
    group_start()
    try:
        yield
    finally:
        group_end()
