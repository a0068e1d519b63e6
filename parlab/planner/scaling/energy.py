"""Energy per training step, where the machine exposes an energy counter — and a plain statement
where it does not.

Go et al., "Characterizing the Efficiency of Distributed Training: A Power, Performance, and
Thermal Perspective" (2025, arXiv 2509.10371) measure training under TP/PP/DP/EP on H100, H200
and MI250 GPUs: throughput beside power draw and temperature. Power and temperature need the
GPUs' sensors; a CPU lab can read at most the CPU package's energy counter, Intel RAPL under
/sys/class/powercap (`intel-rapl:N/energy_uj`, microjoules, wrapping at `max_energy_range_uj`).
`read_energy_counter` reads it or returns None (and `counter_status` says why); `energy_per_step`
reads it around a run of each plan: the whole package's energy over a raw wall-clock run, not
accelerator energy. Their findings and what is measured here: docs/planner.md,
`parlab.planner.scaling.energy`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

POWERCAP = "/sys/class/powercap"
PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")  # intel-rapl:0; its subzones intel-rapl:0:N are parts


@dataclass(frozen=True)
class EnergyReading:
    """One reading of every package zone: cumulative µJ, each zone's wrap range, and when."""

    energy_uj: tuple  # ((zone, µJ), ...)
    range_uj: tuple  # ((zone, max_energy_range_uj), ...)
    names: tuple  # ((zone, its `name` file, e.g. "package-0"), ...)
    t: float  # time.perf_counter() of the reading

    def joules_since(self, before: EnergyReading) -> float:
        """Joules over all zones between `before` and this reading, one wrap per zone allowed."""
        now, then, span = dict(self.energy_uj), dict(before.energy_uj), dict(self.range_uj)
        if set(now) != set(then):
            raise ValueError(f"zones differ between readings: {sorted(then)} then, {sorted(now)} now")
        total = 0
        for zone, value in now.items():
            delta = value - then[zone]
            if delta < 0:  # the counter wrapped at max_energy_range_uj
                if not span[zone]:
                    raise ValueError(f"{zone} went back from {then[zone]} to {value} µJ and its "
                                     "wrap range is unknown")
                delta += span[zone]
            total += delta
        return total / 1e6


def _zones(root: str) -> list[str]:
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    return [e for e in entries if PACKAGE_ZONE.match(e)]


def _read_int(path: str) -> int:
    with open(path) as f:
        return int(f.read().strip())


def read_energy_counter(root: str = POWERCAP) -> EnergyReading | None:
    """Every RAPL package zone's energy counter under `root`, or None when there is no counter
    this process can read (`counter_status` says why)."""
    zones = _zones(root)
    if not zones:
        return None
    energy, ranges, names = [], [], []
    for zone in zones:
        base = os.path.join(root, zone)
        try:
            energy.append((zone, _read_int(os.path.join(base, "energy_uj"))))
        except (OSError, ValueError):
            return None
        try:
            ranges.append((zone, _read_int(os.path.join(base, "max_energy_range_uj"))))
        except (OSError, ValueError):
            ranges.append((zone, 0))  # unknown: a wrap cannot be undone
        try:
            with open(os.path.join(base, "name")) as f:
                names.append((zone, f.read().strip()))
        except OSError:
            names.append((zone, zone))
    return EnergyReading(tuple(energy), tuple(ranges), tuple(names), time.perf_counter())


def counter_status(root: str = POWERCAP) -> str:
    """What the machine offers, in one sentence: the zones read, or why there is no counter."""
    if not os.path.isdir(root):
        return f"no energy counter: {root} does not exist on this machine"
    zones = _zones(root)
    if not zones:
        return f"no energy counter: {root} has no RAPL package zone (intel-rapl:N)"
    reading = read_energy_counter(root)
    if reading is None:
        path = os.path.join(root, zones[0], "energy_uj")
        return (f"no readable energy counter: {path} cannot be read by this process (since 2020 "
                "Linux lets only root read RAPL)")
    return "energy counter: " + ", ".join(f"{zone} ({name})" for zone, name in reading.names)


def energy_per_step(plans: list, steps: int = 3, run: Callable | None = None,
                    root: str = POWERCAP) -> list[dict] | None:
    """For each plan: joules per step and mean watts over `steps` steps of `run(plan, steps)`
    (default: a raw wall-clock run of the scheme `nd`, `search.measure_plan`), the counter read
    before and after. None when there is no counter (`counter_status`)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an int >= 1")
    if read_energy_counter(root) is None:
        return None
    if run is None:
        from parlab.planner.search import measure_plan

        def run(plan, steps):
            return measure_plan(plan, steps, clock="wall")
    rows = []
    for plan in plans:
        before = read_energy_counter(root)
        run(plan, steps)
        after = read_energy_counter(root)
        joules = after.joules_since(before)
        seconds = after.t - before.t
        rows.append({"plan": plan.describe() if hasattr(plan, "describe") else str(plan),
                     "joules_per_step": joules / steps, "seconds": seconds,
                     "watts": joules / seconds if seconds > 0 else float("nan")})
    return rows
