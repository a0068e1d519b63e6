"""An operation in flight: what `Comm(..., async_op=True)` returns.

`wait()` blocks until the op is done (its gloo work objects or its background future), applies
the op's `finish` (unpacking, unpadding), then finds when it completed: on a paced clock the
virtual time its `VirtualOp` computes (`parlab.core.virtual_link`: the link's time and the peers'
posts on the board; nothing sleeps), on the wall clock the real time after waiting until the
emulated link has delivered the bytes (`ready_at`). It then closes the op's ledger record and
draws the wait and the communication on the rank's timeline.
"""

from __future__ import annotations

_NOTHING = object()


class Handle:
    """An op in flight. `wait()` blocks until it is done (and the emulated link has delivered)."""

    def __init__(self, comm, record, ready_at, works=(), future=None, finish=None, vop=None,
                 value=_NOTHING):
        self.comm, self.record, self.ready_at, self.vop = comm, record, ready_at, vop
        self.works, self.future, self.finish = list(works), future, finish
        self.value = value  # a synchronous hand-written op's result, already computed
        self.result = None
        self.done = False

    def wait_real(self):
        """Block until the op's data is here and return it, touching no clock or timeline: for a
        helper thread that hands the result on (PyTorch DDP's comm hook) while the rank's own
        thread calls `wait()` later, which then only prices and draws the op (paced runs)."""
        if self.value is _NOTHING:
            for work in self.works:
                work.wait()
            value = self.future.result() if self.future is not None else None
            self.value = self.finish(value) if self.finish is not None else value
            self.finish = None
        return self.value

    def arrival(self) -> float:
        """Paced runs: the virtual time this op completes, known as soon as its peers have posted
        it on the board — before its data is here. A receiver that takes "whichever message
        arrives first" takes the least arrival of its pending receives (ties: the lowest rank),
        which is conservative synchronisation: every sender that could still deliver earlier has
        posted (`parlab.core.board`). ValueError on the wall clock, where arrival is real."""
        if self.vop is None:
            raise ValueError("Handle.arrival() needs a paced clock (virtual time); on the wall "
                             "clock the first message to arrive is the first to complete")
        if self.vop.duration is None:  # a hand-written algorithm: its bytes are counted as it runs
            self.wait_real()
        return self.vop.end()

    def wait(self):
        if self.done:
            return self.result
        timeline = self.comm.timeline
        timeline.settle()  # paced time: the compute before the wait ends first
        t_wait = timeline.now()
        self.record["t_wait"] = t_wait  # when the rank asked for it (a receive may be posted early)
        value = self.wait_real()
        if self.vop is not None:
            timeline.resume(self.vop.end())
        else:
            self.comm._sleep_until(self.ready_at)
        t1 = timeline.now()
        self.record["t_end"] = t1
        timeline.add("wait", f"wait {self.record['op']}", min(t_wait, t1), t1)
        timeline.add("comm", self.record["op"], self.record["t_start"], t1,
                     bytes=self.record["bytes_sent"], phase=self.record["phase"])
        self.result, self.done = value, True
        # a waited op lets go of gloo's work objects and its future: kept, they hold tensors and
        # a gloo connection alive, and a gloo thread that outlives its interpreter aborts it
        self.works, self.future = [], None
        return value
