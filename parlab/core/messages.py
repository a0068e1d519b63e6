"""One message model: every collective a step issues as a record, bytes its sum, time α-β over it.

A chapter's `cost.py` returns its step's messages (`Message`: op, group, elements, how many, per
micro-batch or once per step, ledger phase); bytes per rank are their ring counts summed
(`parlab.core.cost`: Thakur et al., IJHPCA 2005, §4; exact for uneven chunks), time is
k·α + bytes/β per message (Hockney 1994). The planner composes the chapters' lists
(`parlab.planner.costmodel.messages`); derivations: docs/messages.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from parlab.core import cost
from parlab.core.cost import FP32_BYTES

# op -> (elements sent, received, rounds) of rank r of n; the tensor given is the full one
RING = {"all_reduce": cost.ring_all_reduce, "all_gather": cost.ring_all_gather,
        "reduce_scatter": cost.ring_reduce_scatter}
OPS = (*RING, "p2p", "all_to_all")


@dataclass(frozen=True)
class Message:
    """`count` messages of one kind a rank sends per step (per micro-batch when `pipelined`):
    `op` over a group of `n` ranks on `elements` of `element_bytes` each. all_reduce,
    reduce_scatter and all_gather take the full tensor; p2p and all_to_all what leaves this rank
    (an all-to-all's own block stays). `phase`: the ledger phase it is recorded under."""

    dim: str  # the plan dimension that sends it: "dp", "tp", "pp", "cp", "tie", "ep"
    op: str
    n: int
    elements: int
    count: float = 1
    pipelined: bool = False
    element_bytes: int = FP32_BYTES
    phase: str = ""

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"op={self.op!r} must be one of {OPS}")
        if self.n < 1:
            raise ValueError(f"n={self.n!r} must be >= 1")

    def sent(self, rank: int | None = None) -> int:
        """Bytes rank `rank` of the group sends per message (None: the busiest rank — with uneven
        chunks a ring rank sends all but the chunk it receives last)."""
        if self.op in ("p2p", "all_to_all"):
            return self.elements * self.element_bytes
        ranks = range(self.n) if rank is None else (rank,)
        return max(RING[self.op](self.elements, self.n, r)[0] for r in ranks) * self.element_bytes

    def received(self, rank: int | None = None) -> int:
        """Bytes rank `rank` (None: the busiest) receives per message (p2p, all-to-all: as sent)."""
        if self.op in ("p2p", "all_to_all"):
            return self.sent(rank)
        ranks = range(self.n) if rank is None else (rank,)
        return max(RING[self.op](self.elements, self.n, r)[1] for r in ranks) * self.element_bytes

    def rounds(self) -> int:
        """Sequential rounds of one message (ring: 2(n−1) for all-reduce, n−1 else)."""
        if self.op == "p2p":
            return 1
        return 2 * (self.n - 1) if self.op == "all_reduce" else self.n - 1

    def total(self, microbatches: int = 1, rank: int | None = None) -> int:
        """Bytes of all `count` messages in one step."""
        return int(self.sent(rank) * self.count * (microbatches if self.pipelined else 1))


def total_bytes(messages: list[Message], microbatches: int = 1, rank: int | None = None) -> int:
    """Bytes rank `rank` (None: each message's busiest rank) sends per step."""
    return sum(x.total(microbatches, rank) for x in messages)


def bytes_by(messages: list[Message], key: str = "phase", microbatches: int = 1,
             rank: int | None = None) -> dict:
    """{x.<key>: bytes per step} of `messages` (key "phase", "dim" or "op")."""
    out: dict = {}
    for x in messages:
        k = getattr(x, key)
        out[k] = out.get(k, 0) + x.total(microbatches, rank)
    return out


def bytes_per_dim(messages: list[Message], microbatches: int) -> dict:
    """{dim: bytes sent per step} of one rank's messages."""
    return bytes_by(messages, "dim", microbatches)


def merged(messages: list[Message]) -> list[Message]:
    """Adjacent messages alike but for their phase and count, as one (counts summed): what the
    time model prices, each kind once."""
    out: list[Message] = []
    for x in messages:
        if out and replace(out[-1], count=x.count, phase=x.phase) == x:
            out[-1] = replace(out[-1], count=out[-1].count + x.count)
        else:
            out.append(x)
    return out


def message_time(msg: Message, fit, link) -> float:
    """max(gloo here, emulated link) of one message: k·α + bytes/β each (Thakur et al. 2005).

    fit: a `calibrate_comm` fit of gloo on this machine (None: virtual time, the link alone);
    link: an emulated `parlab.core.link.Link` or None. A cp message is posted round the ring."""
    if msg.n == 1:
        return 0.0
    if fit is None:  # virtual time: the real link alone, gloo's real time is no virtual time
        here = 0.0
    elif msg.op == "p2p" and msg.dim == "cp":  # posted async round the ring
        here = fit.ring_alpha + msg.sent() / fit.ring_beta
    elif msg.op == "p2p":
        here = fit.p2p_alpha + msg.sent() / fit.p2p_beta
    else:
        ab = fit.all_reduce.get(msg.n) or fit.all_reduce[max(fit.all_reduce)]
        scale = 0.5 if msg.op != "all_reduce" else 1.0  # RS / AG: half a ring all-reduce
        here = scale * ab.predict(msg.elements * msg.element_bytes)
    emulated = link.cost(msg.sent(), msg.rounds()) if link is not None else 0.0
    return max(here, emulated)


def alpha_beta_time(messages: list[Message], fit, link, microbatches: int = 1) -> float:
    """Seconds of all of `messages` sent one after another (every message blocking)."""
    return sum(message_time(x, fit, link) * x.count * (microbatches if x.pipelined else 1)
               for x in messages)
