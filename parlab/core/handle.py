"""An operation in flight: what `Comm(..., async_op=True)` returns.

`wait()` blocks until the op is done (its gloo work objects or its background future), applies
the op's `finish` (unpacking, unpadding), waits until the emulated link has delivered the bytes
(`ready_at`, set when the traffic is known), then closes the op's ledger record and draws the
wait and the communication on the rank's timeline.
"""

from __future__ import annotations


class Handle:
    """An op in flight. `wait()` blocks until it is done (and the emulated link has delivered)."""

    def __init__(self, comm, record, ready_at, works=(), future=None, finish=None, ticket=None):
        self.comm, self.record, self.ready_at, self.ticket = comm, record, ready_at, ticket
        self.works, self.future, self.finish = list(works), future, finish
        self.result = None
        self.done = False

    def wait(self):
        if self.done:
            return self.result
        timeline = self.comm.timeline
        timeline.settle()  # paced time: the compute before the wait ends first
        # an op already done when asked for costs the rank only the link's remaining time: its
        # paced clock goes on from max(paced now, delivery), carrying any debt of real work; one
        # that really blocks waited for its peers: their paced issue times (parlab.core.board),
        # or where unknown the real time
        delivered = self._completed()
        paced_t0 = timeline.now()
        self.record["t_wait"] = paced_t0  # when the rank asked for it (a receive may be posted early)
        for work in self.works:
            work.wait()
        value = self.future.result() if self.future is not None else None
        if self.finish is not None:
            value = self.finish(value)
        self.comm._sleep_until(self.ready_at)
        timeline.resume(self.comm.completed_at(paced_t0, self.ready_at, self.ticket, delivered))
        t1 = timeline.now()
        self.record["t_end"] = t1
        timeline.add("wait", f"wait {self.record['op']}", min(paced_t0, t1), t1)
        timeline.add("comm", self.record["op"], self.record["t_start"], t1,
                     bytes=self.record["bytes_sent"], phase=self.record["phase"])
        self.result, self.done = value, True
        return value

    def _completed(self) -> bool:
        """Whether the op's work was already done (without blocking) when the rank asked."""
        if self.future is not None and not self.future.done():
            return False
        return all(work.is_completed() for work in self.works)
