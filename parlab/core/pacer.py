"""One rank's paced clock (`Pacer`) and what it counts (`WorkMeter`): the mechanism behind
`parlab.core.clock`'s paced time, whose docstring says the rules (compute spans last their counted
operators' and FLOPs' time on a reference machine, debt not drift, the clock stands still between
spans). `parlab.core.timeline.Timeline` drives a rank's `Pacer`; `count_work` counts a function the
way a span would, for the models that price work without running a paced launch.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

from parlab.core.clock import OVERRUN_TOLERANCE_S, Clock


def _work_meter_class():
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class WorkMeter(TorchDispatchMode):
        """Counts the aten operators run under it and their FLOPs (communication ops excluded)."""

        def __init__(self):
            super().__init__()
            self.ops, self.flops = 0, 0
            self.counting = True  # False while a communication runs (its reductions are the link's)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if self.counting and func.namespace == "aten":
                self.ops += 1
                count = flop_registry.get(func._overloadpacket)
                if count is not None:
                    self.flops += count(*args, **kwargs, out_val=out)
            return out

    return WorkMeter


_METER = None


def work_meter():
    """A fresh `WorkMeter` (a TorchDispatchMode; its class is built once, on first use)."""
    global _METER
    if _METER is None:
        _METER = _work_meter_class()
    return _METER()


def count_work(fn) -> tuple[int, float]:
    """(aten operators, FLOPs) that `fn()` runs, as a paced compute span counts them: what the
    paced planner's profile (`parlab.planner.paced`) and the heterogeneous chapter's paced rates
    (`parlab.heterogeneous.paced`) price with `Clock.seconds` instead of timing."""
    meter = work_meter()
    with meter:
        fn()
    return meter.ops, meter.flops


# ----------------------------------------------------------------------------- the pacer
@dataclass
class Pacer:
    """One rank's paced clock: compute spans last `clock.seconds(ops, flops, speed)`.

    `enter()` / `exit()` bracket a compute span (nested spans count once, in the outermost);
    `settle()` ends the current compute segment (sleeping to its paced end) before a communication
    leaves, `resume()` starts a new segment when it returns. `stats()` says how much real work
    overran its paced time."""

    clock: Clock
    speed: float = 1.0
    depth: int = 0
    segment_start: float = 0.0
    meter: object = None
    paced_s: float = 0.0
    spans: int = 0
    overruns: int = 0
    overrun_s: float = 0.0
    worst: float = 0.0  # largest real/paced ratio of a segment
    ops: int = 0
    flops: float = 0.0
    late: float = 0.0  # seconds the rank is behind its paced schedule (a debt later slack pays)
    real_waits: int = 0  # waits charged the real time (a peer's paced time unknown)
    held_at: float | None = None  # outside spans: the paced time the clock stands at (None: runs)
    real_depth: int = 0  # inside real_time() blocks: real time is paced time there

    def __post_init__(self):
        # the dispatch machinery imports and initialises on first use (~1 s): pay it now, not in
        # the first compute span
        import torch

        with work_meter():
            torch.ones(2) @ torch.ones(2)

    def now(self) -> float:
        """The rank's paced time: where its clock stands outside spans (`held_at`), else the real
        time less the debt it carries (`late`)."""
        if self.held_at is not None:
            return self.held_at
        return time.perf_counter() - self.late

    def hold(self, paced_at: float) -> None:
        """A paced event ended outside every span: the clock stands at `paced_at` until the next
        span or message; the real time until then is the host's, owed as debt (`release`)."""
        if self.depth == 0 and self.real_depth == 0:
            self.held_at = paced_at

    def release(self) -> None:
        """The clock runs again from where it stood: the real time spent since is debt."""
        if self.held_at is not None:
            self.late = max(0.0, time.perf_counter() - self.held_at)
            self.held_at = None

    @contextmanager
    def real_time(self):
        """A block whose real time is the device's time on purpose (work the pacer cannot meter:
        a backward inside DDP's reducer, an emulated wire's sleep): the clock runs through
        it, then stands where it ended."""
        self.release()
        self.real_depth += 1
        try:
            yield
        finally:
            self.real_depth -= 1
            self.hold(self.now())

    def enter(self) -> None:
        self.depth += 1
        if self.depth == 1:
            self.release()
            self.meter = work_meter()
            self.meter.__enter__()
            # the debt carried in from the last span is paid from this span's slack, not kept
            self.segment_start = self.now()

    def exit(self) -> float | None:
        """Leave a compute span; the outermost settles it and returns its paced end (None: no
        operator ran in its last segment, or an inner span) — what the span records as its end,
        not the paced now read later: real time between the settle and that reading (a rank
        descheduled on a busy machine) is no part of the span."""
        end = None
        if self.depth == 1:
            self.meter.__exit__(None, None, None)
            end = self.settle()
            self.meter = None
        self.depth -= 1
        if self.depth == 0:
            self.hold(end if end is not None else self.now())
        return end

    def settle(self) -> float | None:
        """Sleep until the compute since the segment began has lasted its paced time; returns
        that paced end (None: no operator ran since the segment began)."""
        if self.depth == 0 or self.meter is None:
            return None
        ops, flops = self.meter.ops, self.meter.flops
        self.meter.ops, self.meter.flops, self.meter.counting = 0, 0, False
        if ops == 0:
            return None
        paced = self.clock.seconds(ops, flops, self.speed)
        end = self.segment_start + paced
        now = time.perf_counter()
        late = max(0.0, now - end)
        if late > self.late + OVERRUN_TOLERANCE_S:  # new lateness, not the debt carried in
            self.overruns += 1
            self.overrun_s += late - self.late
        self.late = late
        if paced > 0:
            self.worst = max(self.worst, (now - self.segment_start) / paced)

        delay = end - now
        if delay > 0:
            time.sleep(delay)
            # a busy machine wakes the rank late: the oversleep is debt too, not paced time
            self.late = max(0.0, time.perf_counter() - end)
        self.paced_s += paced
        self.spans += 1
        self.ops += ops
        self.flops += flops
        # drift-free: the next segment starts at this one's paced end, not at the sleep's wake-up
        # or the late end of overrun work: the lateness is a debt that the slack of the segments
        # after it pays back, instead of being added to every span (a rank descheduled for a few
        # ms on a busy machine catches up within its next spans)
        self.segment_start = end
        return end

    def wait_until(self, paced_at: float) -> None:
        """The rank was blocked on a shared resource that another clock's holder released at
        paced time `paced_at` (e.g. the one processor two jobs' threads share): its paced now is
        at least that — the wait is time, as a wait on a peer is; debt it carried is spent on it."""
        if self.held_at is not None:
            self.held_at = max(self.held_at, paced_at)
        self.late = max(0.0, min(self.late, time.perf_counter() - paced_at))

    def resume(self, paced_at: float | None = None) -> None:
        """A communication returned (or an async one was issued): the compute segment restarts at
        paced time `paced_at` — the rank's paced now for an issue or a wait that found the op
        delivered, so the debt carries on to be paid from later slack — or, when the rank really
        blocked on its peers (`None`), at the real now: that wait is the peers' time, not debt."""
        now = time.perf_counter()
        self.real_waits += paced_at is None
        start = now if paced_at is None else min(now, paced_at)
        self.late = now - start
        if self.depth > 0 and self.meter is not None:
            self.meter.counting = True
            self.segment_start = start
        self.hold(start)

    def stats(self) -> dict:
        return {"clock": self.clock.label, "segments": self.spans, "paced_s": self.paced_s,
                "overruns": self.overruns, "overrun_s": self.overrun_s, "real_waits": self.real_waits,
                "late_s": self.late,
                "worst_real_over_paced": self.worst, "ops": self.ops, "flops": self.flops}
