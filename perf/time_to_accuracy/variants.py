"""Gradient reduction variants, each installed on a DDP model.

dense       DDP's own allreduce (tern's ternAllReduce), exact average
ternary-ef  tern.torch.ternary_hook, error feedback on
ternary     tern.torch.ternary_hook, error feedback off
fp16        torch's fp16_compress_hook (half the bytes)
powersgd-rK torch's powerSGD_hook, rank K, error feedback + warm start,
            dense until start_iter (--powersgd-start)
probe       ternary-ef plus measurements (probe.py); not timed fairly

Every variant returns a `stats()` callable (or None) that reports what the
variant knows about its own bytes; the wire counters are read by the trainer.
"""
NAMES = ["dense", "ternary-ef", "ternary", "fp16", "powersgd-r1", "powersgd-r2", "powersgd-r4"]


def bucket_cap_mb(name, opts):
    """DDP's bucket cap for the variant.  PowerSGD gets one bucket: its hook
    issues collectives from completion callbacks, and with several buckets
    the callbacks of different buckets run in a different order on
    different ranks, so the ranks' collectives no longer match (tern says
    so: "rank 1 called allreduce of 2048 float32 ... but rank 0 called
    allreduce of 8192").  One bucket keeps its chain sequential."""
    if name.startswith("powersgd"):
        import torch.distributed as dist
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40  # the first bucket too
        return 1 << 20
    return opts.get("bucket_cap_mb", 25)


def install(model, name, opts):
    """Register the variant's hook on `model` (a DDP); returns stats() or None."""
    # Imported here: the launcher reads NAMES without torch or a built tree.
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    import tern.torch
    if name == "dense":
        return None
    if name == "probe":
        import probe
        return probe.install(model, opts)
    if name in ("ternary-ef", "ternary"):
        state = tern.torch.TernaryState(None, block=opts.get("block", 256), clip=opts.get("clip", 0.0),
                                        error_feedback=(name == "ternary-ef"),
                                        warmup_steps=opts.get("warmup", 0),
                                        min_bytes=opts.get("min_bytes", 0))
        model.register_comm_hook(state, tern.torch.ternary_hook)
        return state.stats
    if name == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if name.startswith("powersgd-r"):
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(name[10:]),
                                   start_powerSGD_iter=opts.get("powersgd_start", 10),
                                   use_error_feedback=True, warm_start=True, random_seed=0)
        model.register_comm_hook(state, psgd.powerSGD_hook)
        return None
    raise ValueError("variant must be one of %s, not %r" % (NAMES, name))
