"""The ProcessGroupTern behind a torch process group.

Its own module so that tern.torch (the backend, the ternary hook) and
tern.scheduler (which tern.torch re-exports) both import it without
importing each other.
"""
import torch
import torch.distributed as dist

from . import _c10d

ProcessGroupTern = _c10d.ProcessGroupTern


def tern_group(process_group=None):
    """The ProcessGroupTern behind `process_group` (default: the world)."""
    pg = process_group if process_group is not None else dist.distributed_c10d._get_default_group()
    if isinstance(pg, ProcessGroupTern):
        return pg
    get_backend = getattr(pg, "_get_backend", None)  # torch 2.x wraps backends
    if get_backend is not None:
        backend = get_backend(torch.device("cpu"))
        if isinstance(backend, ProcessGroupTern):
            return backend
    raise TypeError("the process group is not backend 'tern' (init_process_group('tern'))")
