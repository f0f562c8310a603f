"""A stage's connection to one neighbour: activations or gradients out,
gradients or activations in, over tern send/recv at the pipeline's level.

Deadlock: two neighbours send to each other at once in every steady-state
1F1B step (stage s sends activation i+1 down while stage s+1 sends gradient
i up).  A blocking send can wait for the peer's matching receive, so if both
main threads sent first and received second, each could wait on the other.
Here sends never run on the compute thread: each Link owns a sender thread
that drains a FIFO of outgoing tensors, so the compute thread only ever
blocks in a receive, and a receive waits only on work its neighbour's
compute thread will do earlier in the (acyclic) kFkB order.  tern matches
sends and receives per peer pair, level and direction in issue order
(docs/DESIGN.md, "Priorities and requests (normative)"), so one sender thread per link and receives in ascending
micro-batch order keep both sides' sequences aligned.

Link emulation (the injected-delay knob of the tests and perf scripts):
with `emulate_gbps` set, the sender thread holds each message for its
serialisation time at that rate before handing it to tern, like a wire of
that bandwidth: it delays the transfer, not the compute (the sender thread
is not the compute thread), which is what the planner's link model assumes.
"""
import time

import numpy as np
import torch

import tern

from .background import Background

PIPELINE_LEVEL = 2  # activations and gradients: urgent, but below level 0-1 control traffic
CONTROL_LEVEL = 4   # plan decisions and measurements at batch boundaries (TERN_PRIORITY_DEFAULT)


class at_level:
    """with at_level(n): this thread's tern calls run at priority n, restored after."""

    def __init__(self, level):
        self.level = level

    def __enter__(self):
        self.saved = tern.get_priority()
        tern.set_priority(self.level)

    def __exit__(self, *exc):
        tern.set_priority(self.saved)


class Link:
    def __init__(self, comm, peer, log, send_kind, recv_kind, level=PIPELINE_LEVEL, after=None):
        """after: a link this one replaces (`successor`)."""
        self.comm, self.peer, self.log, self.level = comm, peer, log, level
        self.send_kind, self.recv_kind = send_kind, recv_kind
        self.emulate_gbps = after.emulate_gbps if after else None
        self._wire_free = after._wire_free if after else 0.0  # monotonic time the emulated wire is free again
        self._sender = Background(f"tern-link-{peer}")
        self._sender.submit(lambda: tern.set_priority(level))  # per thread: this thread's sends only
        if after is not None:
            self._sender.submit(lambda: _take_over(after))

    # ---- compute thread ----

    def send(self, tensor, iteration, micro, kind=None):
        """Queues a float32 tensor for the neighbour; returns at once."""
        data = np.ascontiguousarray(tensor.detach().numpy(), dtype=np.float32)
        item = (data, iteration, micro, kind or self.send_kind, time.monotonic())
        self._sender.submit(lambda: self._send_one(*item))

    def recv(self, shape, iteration, micro, kind=None):
        """The neighbour's next tensor (blocking, bounded by tern's timeout)."""
        self._sender.check()
        buf = np.empty(shape, np.float32)
        start = time.monotonic()
        with at_level(self.level):
            self.comm.recv(buf, self.peer)
        self.log.add(iteration, micro, kind or self.recv_kind, start, time.monotonic(), peer=self.peer,
                     bytes=buf.nbytes)
        return torch.from_numpy(buf)

    def drain(self):
        """Waits until every queued send has been handed over and completed."""
        self._sender.wait()

    def close(self):
        self._sender.close()

    def successor(self):
        """A new connection to the same neighbour that replaces this one (a
        live migration's completion) without blocking the compute thread:
        its sender thread first waits until this link has sent everything
        queued to it, then closes it.  tern matches a pair's sends in issue
        order, so the new link's sends must follow the old one's; receives
        stay on the compute thread, in order."""
        return Link(self.comm, self.peer, self.log, self.send_kind, self.recv_kind, self.level, after=self)

    # ---- sender thread ----

    def _send_one(self, data, iteration, micro, kind, ready):
        start = time.monotonic()
        gbps = self.emulate_gbps
        if gbps:
            # The wire's clock, not the thread's: the message occupies the wire
            # from when it and the wire are both ready, so a late wake-up (a
            # loaded host) delays this message but is not added to the next.
            self._wire_free = max(self._wire_free, ready) + data.nbytes * 8 / (gbps * 1e9)
            time.sleep(max(self._wire_free - time.monotonic(), 0.0))
        self.comm.send(data, self.peer)
        self.log.add(iteration, micro, kind, start, time.monotonic(), peer=self.peer, bytes=data.nbytes)


def _take_over(old):
    """On a successor's sender thread: once `old` has sent its queue, close it
    (its error, if any, becomes the successor's)."""
    try:
        old.drain()
    finally:
        old.close()
