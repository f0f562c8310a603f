"""One stage process: python3 -m tern.pipeline.worker CONFIG.json RANK OUTDIR
(the demo launches these; TERN_PIPELINE_UID carries the communicator's id
in hex).  Exit status 0 when the stage finished and saved its part."""
import os
import sys

import tern

from .config import Config
from .runtime import StageRuntime


def _fault(rank):
    """TERN_PIPELINE_FAULT=STAGE:SECONDS: that stage dies that long after it
    starts (tests: a dead stage must be an error on every stage, no hang)."""
    spec = os.environ.get("TERN_PIPELINE_FAULT")
    if spec and int(spec.split(":")[0]) == rank:
        import threading
        threading.Timer(float(spec.split(":")[1]), lambda: os._exit(3)).start()


def _die_with_launcher():
    """Linux: this stage is killed when the launcher dies (PR_SET_PDEATHSIG),
    so a killed demo leaves no stage behind."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv):
    config_path, rank, outdir = argv[0], int(argv[1]), argv[2]
    with open(config_path) as f:
        cfg = Config.from_json(f.read())
    comm = None
    _die_with_launcher()
    _fault(rank)
    if cfg.stages > 1 and cfg.netns:  # emulated hosts: ternrun's variables (TERN_ROOT, TERN_RANK, ...)
        comm = tern.Comm.from_env(timeout=cfg.timeout, flow_classes=cfg.flow_classes or None)
    elif cfg.stages > 1:
        uid = bytes.fromhex(os.environ["TERN_PIPELINE_UID"])
        comm = tern.Comm(uid, cfg.stages, rank, timeout=cfg.timeout, flow_classes=cfg.flow_classes or None)
    try:
        runtime = StageRuntime(cfg, comm, rank)
        runtime.run()
        runtime.save(outdir)
    finally:
        if comm is not None:
            comm.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
