"""The ledger: every communication a rank performs, one record per op.

Written by `parlab.core.comm.Comm` and nothing else. A record holds the op, the algorithm, the group and
its peers, the elements and bytes this rank sent and received, the sequential rounds, the phase
and step labels, and start / end times (`time.perf_counter()`, comparable across the ranks of a
machine). `RunResult.ledger` concatenates the ranks' records; tests compare their bytes with the
closed forms of `parlab.core.cost`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field


class Ledger:
    """Every communication of one rank, one dict per op; `label()` tags records (step, phase)."""

    def __init__(self, rank: int = 0):
        self.rank = rank
        self.records: list[dict] = []
        self.labels: dict = {"phase": None, "step": None}

    @contextmanager
    def label(self, **labels):
        saved = dict(self.labels)
        self.labels.update(labels)
        try:
            yield
        finally:
            self.labels = saved

    def total(self, key: str = "bytes_sent", **match) -> int:
        return sum(r[key] for r in self.records if all(r.get(k) == v for k, v in match.items()))


@dataclass
class Traffic:
    """What one op put on the wire at this rank (filled in by the algorithm as it runs)."""

    sent: int = 0  # elements
    recv: int = 0
    rounds: int = 0
    peers: set = field(default_factory=set)
    tag: int = 0  # a hand-written op's message tags start here (`Comm._handwritten`)
