"""When an op completes in virtual time: one rank's link, its queues, and the board.

`parlab.core.clock` states the rules; this is their arithmetic for one op of one rank
(`Comm` makes a `VirtualOp` for every op on a paced clock; `Handle.wait` asks it for the end):

    ready      = max(issue, free[d] for each direction d the op occupies)   posted on the board
    collective : end = max(ready, every needed peer's ready) + k·α + n/β
    send       : end = ready + α + n/β                       (eager: done when its bytes have left)
    receive    : end = max(issue, the sender's ready + α + n/β)        (arrived, or posted later)

A send occupies the outgoing direction, a collective both, a receive neither (so incoming
messages are not serialised against each other, a simplification stated in `parlab.core.clock`).
The cost is `parlab.core.link.Link.cost`. In full: docs/core.md, `parlab.core.virtual_link`.
"""

from __future__ import annotations

OCCUPIES = {"send": ("tx",), "recv": ()}  # every other op (a collective): ("tx", "rx")


class VirtualOp:
    """One op of one rank in virtual time."""

    def __init__(self, comm, record, ticket_for, duration: float | None):
        """`record`: the op's ledger record (its `t_start` is the issue time); `ticket_for(ready)`
        posts the op on the board and returns the entries its end needs (None: no board);
        `duration`: its link time, or None while its traffic is unknown (a hand-written algorithm
        counts its bytes as it runs: `set_duration` then)."""
        self.op, self.issue = record["op"], record["t_start"]
        self.free = comm._free_at  # {"tx": t, "rx": t}, shared with a job that shares the link
        self.timeout = comm.board_timeout
        self.occupies = OCCUPIES.get(self.op, ("tx", "rx"))
        self.ready = max([self.issue] + [self.free[d] for d in self.occupies])
        self.ticket = ticket_for(self.ready)
        self.duration = None
        self._end = None
        if duration is not None:
            self.set_duration(duration)

    def set_duration(self, seconds: float) -> None:
        self.duration = seconds
        for d in self.occupies:  # busy until then at least; the wait may find it ends later
            self.free[d] = max(self.free[d], self.ready + seconds)

    def end(self) -> float:
        """The virtual time the op completes for this rank (blocks, in real time only, until the
        peers it needs have posted; computed once)."""
        if self._end is None:
            self._end = self._compute_end()
        return self._end

    def _compute_end(self) -> float:
        peers = self.ticket.latest(self.timeout) if self.ticket is not None else float("-inf")
        if self.op == "recv":
            sent = peers if self.ticket is not None else self.issue
            return max(self.issue, sent + self.duration)
        end = max(self.ready, peers) + self.duration
        for d in self.occupies:
            self.free[d] = max(self.free[d], end)
        return end
