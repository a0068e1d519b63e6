"""Emulated links: make one machine's loopback behave like 1GbE, InfiniBand or NVLink.

The α-β (latency-bandwidth, "Hockney") model prices a message of n bytes at α + n/β. A collective
algorithm that runs in k sequential rounds and puts b bytes on a rank's busiest direction costs
k·α + b/β (Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 2005). With a `Link` set, `parlab.core.comm` runs the real operation and then waits
until that much wall time has passed since the link became free, so a slow link shows in step
times and timelines while the results stay exact. The link is full duplex: sends queue behind
sends and receives behind receives, in issue order, so a send and a receive in flight together
overlap. Async ops stay async: only `wait()` sleeps.

Two kinds of link. The *presets* (`PRESETS`: "1GbE", "10GbE", ...) are fixed teaching links: the
real bandwidth divided by `PRESET_SCALE` = 100, the real latency kept. A *faithful* link
(`faithful`) is exact about what matters instead: this machine computes F_cpu FLOP/s on the model
(measured), an accelerator computes F_acc (`ACCELERATORS`, docs/accelerators.md); dilating the
real link's α and β by N = F_acc / F_cpu (α·N, β/N) makes every communication time N times longer,
exactly as every compute time is N times longer here, so the ratio of compute to communication on
this CPU is that of the accelerator on the real link ("1GbE as an A100 sees it, time ×N"). Bytes do
not change, so every closed form of bytes holds on either kind.
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
    dilation: float = 1.0  # N of a faithful link: wall time here = N × the accelerator's time

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
        alpha = (f"{self.latency_s * 1e3:.3g} ms" if self.latency_s >= 1e-3
                 else f"{self.latency_s * 1e6:.0f} µs")
        return f"{self.name} (α={alpha}, β={self.bandwidth_Bps / 1e6:.3g} MB/s)"


# The real links, undilated: (α seconds per message round, β bytes/s per direction).
REAL: dict[str, tuple[float, float]] = {
    "1GbE": (50e-6, 125e6),  # 1 Gbit/s Ethernet, ~50 µs MPI latency
    "10GbE": (20e-6, 1.25e9),  # 10 Gbit/s Ethernet
    "100Gb-IB": (2e-6, 12.5e9),  # EDR InfiniBand, 100 Gbit/s
    "NVLink": (1e-6, 450e9),  # NVLink 4 (H100), 450 GB/s per direction
}


def _scaled(name: str, latency_s: float, real_Bps: float) -> Link:
    return Link(latency_s, real_Bps / PRESET_SCALE, name)


PRESETS: dict[str, Link] = {"loopback": Link(0.0, math.inf, "loopback"),
                            **{name: _scaled(name, *REAL[name]) for name in REAL}}


@dataclass(frozen=True)
class Accelerator:
    """An accelerator by the compute rate it sustains in training (FLOP/s), docs/accelerators.md."""

    name: str
    flops: float
    note: str = ""


ACCELERATORS: dict[str, Accelerator] = {
    "V100": Accelerator("V100", 50e12, "~40% of 125 TFLOP/s fp16 tensor-core peak"),
    "A100": Accelerator("A100", 150e12, "~48% of 312 TFLOP/s bf16 dense peak (Megatron-LM: 52%)"),
    "H100": Accelerator("H100", 400e12, "~40% of 989 TFLOP/s bf16 dense peak"),
}


def dilation(achieved_flops: float, accelerator: str | Accelerator = "A100") -> float:
    """N = accelerator FLOP/s ÷ this machine's achieved FLOP/s: how much slower everything runs here."""
    acc = accelerator if isinstance(accelerator, Accelerator) else _accelerator(accelerator)
    if not (achieved_flops > 0 and math.isfinite(achieved_flops)):
        raise ValueError(f"achieved_flops={achieved_flops!r} must be a finite number > 0")
    return acc.flops / achieved_flops


def faithful(link: str, achieved_flops: float, accelerator: str | Accelerator = "A100") -> Link:
    """The real `link` as `accelerator` sees it, on a machine that computes `achieved_flops`.

    α·N and β/N with N = `dilation(achieved_flops, accelerator)`: a step's communication-to-compute
    ratio here equals the accelerator's on the real link. ValueError names an unknown link,
    accelerator or a rate that is not a positive number.
    """
    if link not in REAL:
        raise ValueError(f"link={link!r} is not a real link; choose one of {sorted(REAL)}")
    acc = accelerator if isinstance(accelerator, Accelerator) else _accelerator(accelerator)
    n = dilation(achieved_flops, acc)
    alpha, beta = REAL[link]
    return Link(alpha * n, beta / n, f"{link} as an {acc.name} sees it, time ×{n:,.0f}", n)


def _accelerator(name: str) -> Accelerator:
    if name not in ACCELERATORS:
        raise ValueError(f"accelerator={name!r} is unknown; choose one of {sorted(ACCELERATORS)} "
                         "or pass parlab.core.link.Accelerator(name, flops)")
    return ACCELERATORS[name]


def comm_compute_ratio(link: Link, nbytes: float, rounds: int, compute_s: float) -> float:
    """Seconds on `link` of `rounds` rounds carrying `nbytes`, per second of compute."""
    return link.cost(nbytes, rounds) / compute_s


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


def achieved_flops(result, warmup: int = 1) -> float:
    """FLOP/s this machine achieved in a run's own compute: 6·Ψ·tokens per rank per step (forward
    2Ψ, backward 4Ψ per token; Kaplan et al., "Scaling Laws for Neural Language Models", 2020)
    over the median forward + backward seconds of rank 0's timeline (steps after `warmup`).

    `result`: a `parlab.run` result of a data-parallel or single run (every rank computes the whole
    model on batch_size / world_size rows of block_size tokens; 1 token per row for the MLP).
    """
    import statistics

    per_step: dict = {}
    for e in result.timeline:
        if e["rank"] == 0 and e["kind"] == "compute" and e["name"] in ("forward", "backward"):
            step = e.get("args", {}).get("step")
            per_step[step] = per_step.get(step, 0.0) + e["t1"] - e["t0"]
    spans = [per_step[s] for s in sorted(per_step, key=lambda s: (s is None, s))]
    if not spans:
        raise ValueError("the run's timeline has no forward/backward spans on rank 0")
    seconds = statistics.median(spans[warmup:] or spans)
    cfg = result.config
    psi = sum(t.numel() for t in result.state.values())
    tokens = cfg.batch_size // cfg.world_size * getattr(cfg.model_config, "block_size", 1)
    return 6 * psi * tokens / seconds
