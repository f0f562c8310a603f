"""A thread that runs a stage's calls in order, off its compute thread: a
Link's sends (so the compute thread only ever blocks in receives, links.py)
and a live migration's slow one-off calls, opening the weight stream on
the receiving stage (a handshake that waits for the outgoing stage) and
closing it (Close waits for the peer's acknowledgement).  The compute
thread waits for it only where it needs the result (`wait`: a batch's
sends done, the stream open before the first install), so a handshake's
round trip falls in time the stage would spend waiting on its neighbours
anyway.  After a call fails the later ones are skipped, and the error
surfaces on the compute thread's next `submit`, `wait` or `check`."""
import queue
import threading


class Background:
    def __init__(self, name):
        self._calls = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, call):
        """Runs call() after everything submitted before it; returns at once."""
        self.check()
        self._calls.put(call)

    def wait(self):
        """Returns once every submitted call has run; raises the first error."""
        self._calls.join()
        self.check()

    def check(self):
        if self._error is not None:
            raise self._error

    def close(self, timeout=5):
        """Stops the thread after the calls submitted so far (errors are left to wait/check)."""
        self._calls.put(None)
        self._thread.join(timeout=timeout)

    def _loop(self):
        while True:
            call = self._calls.get()
            try:
                if call is None:
                    return
                if self._error is None:
                    call()
            except Exception as e:  # noqa: BLE001 - surfaces on the compute thread
                self._error = e
            finally:
                self._calls.task_done()
