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
"""
import contextlib

from ._tern import (PRIORITY_DEFAULT, PRIORITY_LEVELS, Comm, Error, get_priority, group_end,
                    group_start, set_priority, unique_id, version)

__all__ = ["Comm", "Error", "unique_id", "version", "group", "set_priority", "get_priority",
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
