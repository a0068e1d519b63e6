"""A seeded delay schedule: asynchrony that can be replayed.

Every computation of worker w (its k-th gradient) takes `slowdown(w, k)` = factor_w · (1 + jitter
· U_{w,k}) units of a virtual clock, U_{w,k} uniform in [0, 1) drawn from (seed, w, k) alone.
With `delays="seeded"` the server serves workers in arrival order on this clock (`VirtualClock`),
so a run is a pure function of its configuration — the order `parlab.asynchrony.versions.simulate`
and the closed forms (`parlab.asynchrony.cost`) replay. Workers also take (slowdown − 1) × their
compute's time longer (slept on the wall clock, virtual on a paced one). This is how Ho et al.
(SSP, NeurIPS 2013) and Dean et al. (Downpour, NeurIPS 2012) can be tested: their properties must
hold for every order, and a seeded order is one of them. Why this clock is kept beside the paced
one: docs/asynchrony.md, `parlab.asynchrony.delays`.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class DelaySchedule:
    """slowdown(w, k) for workers 1..workers (world ranks); the last is the straggler."""

    workers: int
    seed: int = 0
    straggler: float = 1.0  # factor of the last worker's compute time
    jitter: float = 0.0  # each computation takes up to (1 + jitter)× longer, seeded
    ratios: tuple | None = None  # per worker 1..W: its work relative to a full job (dual-batch)

    def factor(self, worker: int) -> float:
        ratio = self.ratios[worker - 1] if self.ratios else 1.0
        return ratio * (self.straggler if worker == self.workers else 1.0)

    def slowdown(self, worker: int, k: int) -> float:
        """How many times its plain compute time worker `worker`'s k-th gradient takes."""
        u = random.Random(self.seed * 1_000_003 + worker * 10_007 + k).random() if self.jitter else 0.0
        return self.factor(worker) * (1.0 + self.jitter * u)


class VirtualClock:
    """Virtual arrival times of the gradients in flight; the server serves the earliest first
    (ties: the lowest rank), so the order is the schedule's, whatever the real timing."""

    def __init__(self, schedule: DelaySchedule):
        self.schedule = schedule
        self.now = 0.0
        self.count = {w: 0 for w in range(1, schedule.workers + 1)}  # computations started
        self.in_flight: list[tuple[float, int]] = []  # heap of (arrival time, worker)

    def dispatch(self, worker: int) -> None:
        """Worker `worker` starts a computation now (it has just been sent parameters)."""
        duration = self.schedule.slowdown(worker, self.count[worker])
        self.count[worker] += 1
        heapq.heappush(self.in_flight, (self.now + duration, worker))

    def next(self) -> int:
        """The worker whose gradient arrives first; the clock moves to that arrival."""
        self.now, worker = heapq.heappop(self.in_flight)
        return worker
