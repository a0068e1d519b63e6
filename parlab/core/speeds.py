"""Emulated heterogeneous devices: every rank computes at its own speed.

A heterogeneous cluster mixes devices of different compute rates (Zhang et al., "HAP: SPMD DNN
Training on Heterogeneous GPU Clusters with Automated Program Synthesis", EuroSys 2024).
`parlab.run(..., speeds=[1, 1, 0.5, 0.25])` gives rank r the speed s_r: each compute span does
its real work (c CPU seconds of the rank's thread), then waits until it has lasted c/s_r, so the
slow rank's bars are longer and every rank that synchronises with it waits. Results do not
change: only the time does. Why CPU time, not wall time (ranks share cores): docs/core.md,
`parlab.core.speeds`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

MIN_SPEED, MAX_SPEED = 1e-3, 1e3  # a device 1000× slower or faster than this CPU, at most


def check(speeds, world_size: int) -> tuple[float, ...] | None:
    """`speeds` as a tuple of floats (None: every rank at speed 1); ValueError names a list of the
    wrong length or a speed outside [MIN_SPEED, MAX_SPEED]."""
    if speeds is None:
        return None
    if isinstance(speeds, (str, bytes)) or not hasattr(speeds, "__len__"):
        raise ValueError(f"speeds={speeds!r} must be a list of {world_size} numbers > 0 (one per rank)")
    if len(speeds) != world_size:
        raise ValueError(f"speeds={list(speeds)!r} has {len(speeds)} entries; world_size={world_size} "
                         "needs one speed per rank")
    bad = [s for s in speeds if isinstance(s, bool) or not isinstance(s, (int, float))
           or not (MIN_SPEED <= s <= MAX_SPEED)]
    if bad:
        raise ValueError(f"speeds={list(speeds)!r}: {bad} must be numbers in [{MIN_SPEED:g}, "
                         f"{MAX_SPEED:g}] (1 = this machine's rate, 0.25 = four times slower; a "
                         "span lasts 1/speed as long, which must stay a time the clock can keep)")
    return tuple(float(s) for s in speeds)


def speed_of(cfg, rank: int) -> float:
    """Rank `rank`'s speed under `cfg` (1.0 when the run sets no speeds)."""
    speeds = getattr(cfg, "speeds", None)
    return 1.0 if speeds is None else speeds[rank]


def sleep_until(t: float) -> None:
    """Wait until `time.perf_counter()` reaches `t` (returns at once if it has)."""
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


@contextmanager
def stretched(speed: float):
    """Run the body, then wait until it has lasted (its CPU seconds) / speed."""
    t0, cpu0 = time.perf_counter(), time.thread_time()
    yield
    if speed != 1.0:
        sleep_until(t0 + (time.thread_time() - cpu0) / speed)


@contextmanager
def span(timeline, name: str, kind: str, speed: float, **args):
    """`timeline.span(name, kind, **args)`; a compute span of a rank at `speed` lasts 1/speed as long."""
    with timeline.span(name, kind, **args):
        if kind == "compute" and speed != 1.0:
            with stretched(speed):
                yield
        else:
            yield
