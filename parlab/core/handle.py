"""An operation in flight: what `Comm(..., async_op=True)` returns.

`wait()` blocks until the op is done (its gloo work objects or its background future), applies
the op's `finish` (unpacking, unpadding), waits until the emulated link has delivered the bytes
(`ready_at`, set when the traffic is known), then closes the op's ledger record and draws the
wait and the communication on the rank's timeline.
"""

from __future__ import annotations

import time


class Handle:
    """An op in flight. `wait()` blocks until it is done (and the emulated link has delivered)."""

    def __init__(self, comm, record, ready_at, works=(), future=None, finish=None):
        self.comm, self.record, self.ready_at = comm, record, ready_at
        self.works, self.future, self.finish = list(works), future, finish
        self.result = None
        self.done = False

    def wait(self):
        if self.done:
            return self.result
        self.comm.timeline.settle()  # paced time: the compute before the wait ends first
        t0 = time.perf_counter()
        self.record["t_wait"] = t0  # when the rank asked for it (a receive may be posted early)
        for work in self.works:
            work.wait()
        value = self.future.result() if self.future is not None else None
        if self.finish is not None:
            value = self.finish(value)
        self.comm._sleep_until(self.ready_at)
        t1 = time.perf_counter()
        self.record["t_end"] = t1
        timeline = self.comm.timeline
        timeline.add("wait", f"wait {self.record['op']}", t0, t1)
        timeline.add("comm", self.record["op"], self.record["t_start"], t1,
                     bytes=self.record["bytes_sent"], phase=self.record["phase"])
        self.result, self.done = value, True
        timeline.resume()
        return value
