"""Emulated links: make one machine's loopback behave like 1GbE, InfiniBand or NVLink.

The α-β (latency-bandwidth, "Hockney") model prices a message of n bytes at α + n/β. A collective
algorithm that runs in k sequential rounds and puts b bytes on a rank's busiest direction costs
k·α + b/β (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 2005). With a `Link` set, `parlab.core.comm` runs the real operation and then waits
until that much wall time has passed since the link became free, so a slow link shows in step
times and timelines while the results stay exact. The link is full duplex: sends queue behind
sends and receives behind receives, in issue order, so a send and a receive in flight together
overlap. Async ops stay async: only `wait()` sleeps.

CPU-sized models compute ~100× slower than a GPU, so the presets divide each real bandwidth by
`PRESET_SCALE` = 100 and keep the real latency: the ratio of compute time to communication time
of a CPU model on a preset stays close to that of a GPU model on the real link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRESET_SCALE = 100.0


@dataclass(frozen=True)
class Link:
    """A network link: `latency_s` (α, seconds per message round) and `bandwidth_Bps` (β)."""

    latency_s: float
    bandwidth_Bps: float
    name: str = "custom"

    def __post_init__(self):
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(f"latency_s={self.latency_s!r} must be a finite number >= 0")
        if not self.bandwidth_Bps > 0:
            raise ValueError(f"bandwidth_Bps={self.bandwidth_Bps!r} must be > 0")

    def cost(self, nbytes: float, rounds: int = 1) -> float:
        """Seconds for `rounds` sequential messages that carry `nbytes` in total: k·α + n/β."""
        return rounds * self.latency_s + nbytes / self.bandwidth_Bps

    @property
    def is_free(self) -> bool:
        return self.latency_s == 0 and math.isinf(self.bandwidth_Bps)

    def __str__(self) -> str:
        if self.is_free:
            return f"{self.name} (no emulated delay)"
        return (f"{self.name} (α={self.latency_s * 1e6:.0f} µs, "
                f"β={self.bandwidth_Bps / 1e6:.3g} MB/s)")


def _scaled(name: str, latency_s: float, real_Bps: float) -> Link:
    return Link(latency_s, real_Bps / PRESET_SCALE, name)


PRESETS: dict[str, Link] = {
    "loopback": Link(0.0, math.inf, "loopback"),
    "1GbE": _scaled("1GbE", 50e-6, 125e6),  # 1 Gbit/s Ethernet, ~50 µs MPI latency
    "10GbE": _scaled("10GbE", 20e-6, 1.25e9),  # 10 Gbit/s Ethernet
    "100Gb-IB": _scaled("100Gb-IB", 2e-6, 12.5e9),  # EDR InfiniBand, 100 Gbit/s
    "NVLink": _scaled("NVLink", 1e-6, 450e9),  # NVLink 4 (H100), 450 GB/s per direction
}


def resolve(link: Link | str | None) -> Link | None:
    """A Link, a preset name, or None (no emulation) -> Link or None; ValueError names the bad value."""
    if link is None or isinstance(link, Link):
        return None if isinstance(link, Link) and link.is_free else link
    if isinstance(link, str):
        if link not in PRESETS:
            raise ValueError(f"link={link!r} is not a preset; choose one of {sorted(PRESETS)} "
                             "or pass parlab.core.link.Link(latency_s, bandwidth_Bps)")
        return None if PRESETS[link].is_free else PRESETS[link]
    raise ValueError(f"link={link!r} must be a preset name, a parlab.core.link.Link or None")
