"""How one `Comm` op is carried out: its ledger record, its traffic and time on the link, and
its run through gloo or a hand-written algorithm — on the wall clock (an emulated link really
waits) or on a paced clock (the op is priced from the ranks' posts on the board:
`parlab.core.virtual_link`). `parlab.core.comm.Comm` is the API; this is its machinery, kept apart
so that the API reads top to bottom.
"""

from __future__ import annotations

import time
import weakref
from concurrent.futures import ThreadPoolExecutor

from parlab.core import board as paced_board
from parlab.core import collectives
from parlab.core.handle import Handle
from parlab.core.ledger import Traffic
from parlab.core.link import Link
from parlab.core.shapes import is_fake
from parlab.core.topology import Topology
from parlab.core.virtual_link import VirtualOp


class OpMachinery:
    """The op machinery `Comm` inherits: it needs a Comm's `ledger`, `timeline`, `link`, `posts`,
    `rank`, `size`, `ranks`, `name`, `_free_at`, `_executor` and `_handwritten_ops`."""

    def _ring_peers(self) -> set:
        return {(self.rank + 1) % self.size, (self.rank - 1) % self.size} - {self.rank}

    def _record(self, op, algo, tensor, phase, numel=None) -> dict:
        record = {
            "rank": self.ledger.rank, "op": op, "algo": algo, "group": self.name,
            "group_ranks": tuple(self.ranks), "peers": (),
            "dtype": str(tensor.dtype).replace("torch.", ""),
            "numel": tensor.numel() if numel is None else numel, "elements_sent": 0, "elements_recv": 0,
            "bytes_sent": 0, "bytes_recv": 0, "rounds": 0,
            "phase": phase if phase is not None else self.ledger.labels.get("phase"),
            "step": self.ledger.labels.get("step"), "t_start": self.timeline.now(), "t_end": None,
            "nominal": False,
        }
        self.ledger.records.append(record)
        return record

    def _fill(self, record, traffic: Traffic, itemsize: int) -> None:
        """Fill in the record's traffic."""
        record.update(elements_sent=traffic.sent, elements_recv=traffic.recv,
                      bytes_sent=traffic.sent * itemsize, bytes_recv=traffic.recv * itemsize,
                      rounds=traffic.rounds, peers=tuple(self.ranks[p] for p in
                                                         sorted(traffic.peers)))

    def _duration(self, record, peers, pieces=None, item: int = 1) -> float:
        """The op's time on its link: k·α + n/β for the bytes on its busier direction; an
        all-to-all whose peers sit behind links of different kinds (`pieces`: elements sent to
        and received from each group rank, `item` bytes each) is priced per pair
        (`Topology.all_to_all_seconds`)."""
        if pieces is not None and isinstance(self.link, Topology):
            seconds = self.link.all_to_all_seconds(
                self.ranks[self.rank], [(self.ranks[p], sent * item, received * item)
                                        for p, (sent, received) in enumerate(zip(*pieces))
                                        if p != self.rank])
            if seconds is not None:
                return seconds
        link = self._link_for(record["op"], peers)
        if link is None:
            return 0.0
        return link.cost(max(record["bytes_sent"], record["bytes_recv"]), record["rounds"])

    def _account(self, record, traffic: Traffic, itemsize: int) -> float:
        """Wall clock: fill in the traffic; return when the emulated link will have delivered it."""
        self._fill(record, traffic, itemsize)
        link = self._link_for(record["op"], traffic.peers)
        if link is None:
            return 0.0
        # A full-duplex link: what this rank sends queues behind earlier sends, what it receives
        # behind earlier receives, so a send and a receive in flight together (a ring step, an
        # isend/irecv exchange) overlap instead of paying twice.
        ready = record["t_start"]
        for direction, nbytes in (("tx", record["bytes_sent"]), ("rx", record["bytes_recv"])):
            # an op that moves nothing (a barrier) still pays its latency, on the outgoing side;
            # a receive occupies only the incoming one, or a receive posted beside a send (an
            # exchange) would queue that send behind its α
            if nbytes or (direction == "tx" and record["op"] != "recv"):
                start = max(record["t_start"], self._free_at[direction])
                self._free_at[direction] = start + link.cost(nbytes, traffic.rounds)
                ready = max(ready, self._free_at[direction])
        return ready

    @property
    def virtual(self) -> bool:
        """Whether this Comm keeps virtual time (its timeline has a pacer: a paced clock)."""
        return self.timeline.pacer is not None

    def _gloo(self, op, tensor, traffic, phase, async_op, start, finish=None, numel=None,
              needs=None, pieces=None):
        self.timeline.settle()  # paced time: the message leaves when the compute before it ends
        record = self._record(op, "gloo", tensor, phase, numel)
        if self.virtual:
            self._fill(record, traffic, tensor.element_size())
            vop = VirtualOp(self, record, lambda ready: self._post(record, traffic.peers, ready,
                                                                   needs),
                            self._duration(record, traffic.peers, pieces,
                                           tensor.element_size()))
            # shapes-only (parlab.core.shapes): a fake tensor never enters gloo; the op is its
            # posts on the board and its real byte count, priced like any other
            works = [] if is_fake(tensor) else start()
            handle = Handle(self, record, 0.0, works=works, finish=finish, vop=vop)
        else:
            ready_at = self._account(record, traffic, tensor.element_size())
            handle = Handle(self, record, ready_at, works=start(), finish=finish)
        if async_op:
            self.timeline.resume()  # issuing is free
            return handle
        return handle.wait()

    def _handwritten(self, op, algo, tensor, phase, async_op, body, numel=None):
        self.timeline.settle()  # paced time: the message leaves when the compute before it ends
        record = self._record(op, algo, tensor, phase, numel)
        everyone = set(range(self.size)) - {self.rank}
        vop = (VirtualOp(self, record, lambda ready: self._post(record, everyone, ready), None)
               if self.virtual else None)
        # each op gets tags of its own, counted in issue order (the same on every rank, as the
        # collectives themselves must be): a sync op on this thread and an async one on the
        # background thread then never take each other's messages between the same two ranks
        traffic = Traffic(tag=collectives.TAG_BASE
                          + (self._handwritten_ops % collectives.TAG_SLOTS) * collectives.MAX_SEGMENTS)
        self._handwritten_ops += 1

        def run():
            return body(traffic)

        def counted(value):
            # the traffic is known once the algorithm ran: only then can the link price it
            if vop is not None:
                self._fill(record, traffic, tensor.element_size())
                vop.set_duration(self._duration(record, traffic.peers))
                return value, None
            return value, self._account(record, traffic, tensor.element_size())

        if not async_op:
            value, ready_at = counted(run())
            return Handle(self, record, ready_at, vop=vop, value=value).wait()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parlab-comm")
            weakref.finalize(self, self._executor.shutdown, wait=False)
        handle = Handle(self, record, 0.0, future=self._executor.submit(run), vop=vop)

        def finish(value):
            value, ready_at = counted(value)
            if ready_at is not None:
                handle.ready_at = ready_at  # Handle.wait sleeps until then (wall clock)
            return value

        handle.finish = finish
        self.timeline.resume()  # issuing is free
        return handle

    def _post(self, record, peers, ready: float, needs=None) -> paced_board.Ticket | None:
        """Post this op on the board, ready at virtual time `ready`; return the entries its end
        needs (`parlab.core.board.Posts.post`; None without a board)."""
        return self.posts.post(record["op"], peers, ready, needs)

    def _link_for(self, op: str, peers) -> Link | None:
        """The link an op crosses: the one Link, or with a `Topology` (parlab.core.topology) the
        pair's link for a message and the group's slowest link for a collective."""
        if not isinstance(self.link, Topology):
            return self.link
        if op in ("send", "recv"):
            return self.link.link_for([self.ranks[self.rank]] + [self.ranks[p] for p in peers])
        return self.link.link_for(self.ranks)

    def _sleep_until(self, ready_at: float) -> None:
        delay = ready_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

