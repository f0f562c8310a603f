"""The runtime's event log: one record per forward, backward, send, receive,
optimizer step, probe and plan decision, with (iteration, micro-batch, stage,
kind, start, end).  Times are time.monotonic() seconds: one clock for every
process of a host (CLOCK_MONOTONIC), so stages' logs line up.  The migration
issue checks its timing rules against this log."""
import json
import threading
import time

KINDS = ("fwd", "bwd", "send_act", "send_grad", "recv_act", "recv_grad", "opt", "probe", "plan",
         # live layer migration (migration.py): message, receiver's layers made, weights pushed /
         # installed, partition switched (FROM frees, TO adds, connections replaced)
         "mig_msg", "mig_prepare", "mig_push", "mig_install", "mig_switch",
         # --rebalance under async (rebalance_async.py): a stage's row to stage 0, its decision back
         "rebalance_row", "rebalance_decision")


class EventLog:
    def __init__(self, stage):
        self.stage = stage
        self.events = []
        self._lock = threading.Lock()  # the link's sender threads log too

    def add(self, iteration, micro, kind, start, end, **extra):
        assert kind in KINDS, kind
        ev = {"iteration": iteration, "micro": micro, "stage": self.stage, "kind": kind,
              "start": start, "end": end}
        ev.update(extra)
        with self._lock:
            self.events.append(ev)
        return ev

    def timed(self, iteration, micro, kind, **extra):
        """with log.timed(...): records the block's start and end."""
        return _Timed(self, iteration, micro, kind, extra)

    def of(self, iteration=None, kind=None):
        with self._lock:
            return [e for e in self.events
                    if (iteration is None or e["iteration"] == iteration) and (kind is None or e["kind"] == kind)]

    def dump(self, path):
        with self._lock, open(path, "w") as f:
            json.dump(self.events, f)


class _Timed:
    def __init__(self, log, iteration, micro, kind, extra):
        self.log, self.args, self.extra = log, (iteration, micro, kind), extra

    def __enter__(self):
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.log.add(*self.args, self.start, time.monotonic(), **self.extra)
