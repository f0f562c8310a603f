"""Pipeline-parallel training over tern send/recv (docs/DESIGN.md, kFkB pipeline
planner, seed 001): one process per stage, a model given as a list of layers
with global indices split into stages, synchronous flushing kFkB or
asynchronous PipeDream 1F1B with weight stashing, measured and re-planned
at batch boundaries.  The command line is tern.pipeline.demo; docs/PIPELINE.md
describes the pieces.

    from tern.pipeline import Config, run
    report = run(Config(stages=3, layers=6, schedule="flush", microbatches=4, k=2), "out")
"""
from .config import Config
from .launch import run
from .schedule import kfkb_order

__all__ = ["Config", "run", "kfkb_order"]
