"""A seeded delay schedule: asynchrony that can be replayed.

Real asynchrony depends on the operating system's timing, so no two runs agree and no test can
say what "the" result is. Here every computation of worker w (its k-th gradient) takes
`slowdown(w, k)` = factor_w · (1 + jitter · U_{w,k}) units of a virtual clock, U_{w,k} uniform in
[0, 1) drawn from (seed, w, k) alone; factor_w is the straggler's factor on the last worker, 1
elsewhere. With `delays="seeded"` the server serves workers in the order of their arrival times
on this schedule's clock (`VirtualClock`: one unit per plain computation, no communication),
never in the order the operating system delivered the messages, so a run is a pure function of
its configuration on any clock — and the order is exactly what `parlab.asynchrony.versions.simulate`
and the closed forms (`parlab.asynchrony.cost`) replay. Workers also take (slowdown − 1) × their
compute's time longer: on the wall clock they sleep it, on a paced clock it is virtual time
(`Timeline.advance`), so the timings see the same straggler and jitter as the schedule's order.

Why the schedule's clock is kept beside the paced one (`clock="A100"`, virtual time): a paced run
without seeded delays is reproducible too — its server takes pushes in virtual arrival order
(`parlab.asynchrony.server`) — but that order also depends on what each computation and message
costs on the accelerator and the link; the schedule's order depends on the seed alone, so the
pure-Python replay above predicts it exactly, on any clock.

This is how Ho et al. (SSP, NeurIPS 2013) and Dean et al. (Downpour, 2012) can be tested: the
properties (staleness ≤ s, every gradient applied once) must hold for every order; a seeded order
is one of them, chosen so that the straggler really lags.
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
