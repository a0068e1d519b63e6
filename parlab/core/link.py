"""Emulated links: make one machine's loopback behave like 1GbE, InfiniBand or NVLink.

The α-β (latency-bandwidth, "Hockney") model: k sequential rounds putting b bytes on a rank's
busiest direction cost k·α + b/β (Thakur, Rabenseifner & Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005). With a `Link` set, `parlab.core.comm` runs the
real operation, then waits until that much wall time has passed since the (full-duplex) link was
free: results stay exact. Presets (`PRESETS`) are real links with bandwidth ÷ `PRESET_SCALE`;
a *faithful* link dilates α and β by N = F_acc / F_cpu, so compute and communication keep the
accelerator's ratio. Bytes never change.

The hardware constants live here and only here (sources: docs/accelerators.md), NVLink per
direction from NVIDIA's datasheets: NVLink 2 (V100) 150 GB/s, NVLink 3 (A100) 300 GB/s, NVLink 4
(H100) 450 GB/s. The two kinds of link and the datasheet arithmetic: docs/core.md, `parlab.core.link`.
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
                 else f"{self.latency_s * 1e6:.3g} µs")
        return f"{self.name} (α={alpha}, β={self.bandwidth_Bps / 1e6:.3g} MB/s)"


# The real links, undilated: (α seconds per message round, β bytes/s per direction).
REAL: dict[str, tuple[float, float]] = {
    "1GbE": (50e-6, 125e6),  # 1 Gbit/s Ethernet, ~50 µs MPI latency
    "10GbE": (20e-6, 1.25e9),  # 10 Gbit/s Ethernet
    "100Gb-IB": (2e-6, 12.5e9),  # EDR InfiniBand, 100 Gbit/s
    "HDR-IB": (2e-6, 25e9),  # HDR InfiniBand, 200 Gbit/s per GPU (DGX A100: 8 per node)
    "NDR-IB": (2e-6, 50e9),  # NDR InfiniBand, 400 Gbit/s per GPU (DGX H100: 8 per node)
    "NVLink2": (1e-6, 150e9),  # V100: 6 links × 25 GB/s per direction (300 GB/s total)
    "NVLink3": (1e-6, 300e9),  # A100: 12 links × 25 GB/s per direction (600 GB/s total)
    "NVLink4": (1e-6, 450e9),  # H100: 18 links × 25 GB/s per direction (900 GB/s total)
}
REAL["NVLink"] = REAL["NVLink3"]  # the name users type: the default accelerator's (A100) NVLink

GENERATION = {"NVLink2": "NVLink 2", "NVLink3": "NVLink 3", "NVLink4": "NVLink 4"}


def _scaled(name: str, latency_s: float, real_Bps: float) -> Link:
    return Link(latency_s, real_Bps / PRESET_SCALE, f"{name} ÷{PRESET_SCALE:.0f} (teaching preset)")


PRESETS: dict[str, Link] = {"loopback": Link(0.0, math.inf, "loopback"),
                            **{name: _scaled(name, *REAL[name]) for name in REAL}}


def preset_name(link) -> str | None:
    """The key of `PRESETS` that `link` is ("1GbE" for the 1GbE teaching preset), else None."""
    for name, preset in PRESETS.items():
        if preset == link:
            return name
    return None


# A kernel's launch overhead, ~4 µs: NVIDIA's "Getting Started with CUDA Graphs" (Technical Blog,
# 2019) measures 3.8 µs per short kernel launched back to back on a V100 (2.9 µs of it the kernel);
# the same order on A100/H100 ("CUDA C++ Best Practices Guide": launch overhead of a few µs). A
# model this small runs launch-bound on a GPU: its time is operators × this, not its FLOPs.
LAUNCH_S = 4e-6


@dataclass(frozen=True)
class Accelerator:
    """An accelerator by the compute rate it sustains in training (FLOP/s), its NVLink generation
    (a key of `REAL`) and its memory per device in bytes (None: not stated); docs/accelerators.md."""

    name: str
    flops: float
    note: str = ""
    nvlink: str = "NVLink"
    memory_bytes: float | None = None
    inter: str = "100Gb-IB"  # the link between nodes of its usual cluster (a key of `REAL`)
    launch_s: float = LAUNCH_S  # the device's fixed cost per operator (a kernel launch)
    peak_flops: float | None = None  # datasheet dense fp16/bf16 tensor-core peak (FLOP/s)
    hbm_Bps: float | None = None  # datasheet memory bandwidth (bytes/s): `parlab.core.roofline`


ACCELERATORS: dict[str, Accelerator] = {
    # peaks and bandwidths from NVIDIA's datasheets: V100 SXM2 (125 TFLOP/s fp16, HBM2 900 GB/s),
    # A100 80GB SXM (312 TFLOP/s bf16, HBM2e 2,039 GB/s), H100 SXM5 (989 TFLOP/s bf16, HBM3
    # 3.35 TB/s)
    "V100": Accelerator("V100", 50e12, "~40% of 125 TFLOP/s fp16 tensor-core peak", "NVLink2", 32e9,
                        "100Gb-IB", peak_flops=125e12, hbm_Bps=900e9),
    "A100": Accelerator("A100", 150e12, "~48% of 312 TFLOP/s bf16 dense peak (Megatron-LM: 52%)",
                        "NVLink3", 80e9, "HDR-IB", peak_flops=312e12, hbm_Bps=2039e9),
    "H100": Accelerator("H100", 400e12, "~40% of 989 TFLOP/s bf16 dense peak", "NVLink4", 80e9,
                        "NDR-IB", peak_flops=989e12, hbm_Bps=3.35e12),
}


def nvlink_for(link: str, accelerator: str | Accelerator | None = None) -> str:
    """The key of `REAL` that the name `link` means on `accelerator`: "NVLink" is the accelerator's
    own generation (the A100's NVLink 3 when no accelerator is given); any other name is itself."""
    if link != "NVLink":
        return link
    accelerator = "A100" if accelerator is None else accelerator
    acc = accelerator if isinstance(accelerator, Accelerator) else _accelerator(accelerator)
    return acc.nvlink


def real(link: str, accelerator: str | Accelerator | None = None) -> Link:
    """The real (undilated) `link` as a `Link`, "NVLink" resolved to `accelerator`'s generation."""
    key = nvlink_for(link, accelerator)
    if key not in REAL:
        raise ValueError(f"link={link!r} is not a real link; choose one of {sorted(REAL)}")
    return Link(*REAL[key], name=_label(link, key))


def _label(link: str, key: str) -> str:
    """'NVLink (NVLink 3)' for the typed name, 'NVLink 4' for a generation, the name otherwise."""
    if key in GENERATION:
        return f"{link} ({GENERATION[key]})" if link != key else GENERATION[key]
    return link


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
    key = nvlink_for(link, acc)
    alpha, beta = REAL[key]
    return Link(alpha * n, beta / n, f"{_label(link, key)} as an {acc.name} sees it, time ×{n:,.0f}", n)


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


_CPU_FLOPS: dict = {}


def cpu_flops(tokens: int = 384, width: int = 32, layers: int = 4, repeats: int = 7) -> float:
    """This machine's FLOP/s, measured once per process (cached) and the same for every chapter:
    forward + backward of `layers` bias-free MLPs width → 4·width → width on `tokens` rows (the
    tiny GPT's MLP shapes: 12 rows × 32 tokens, n_embd 32), one thread like a rank; 6·Ψ·tokens
    FLOPs (as `achieved_flops` counts) over the fastest of `repeats` passes. A measurement, printed
    as one (`cpu_flops_line`); the paced clock's F_ref is a defined reference, not this number."""
    key = (tokens, width, layers, repeats)
    if key not in _CPU_FLOPS:
        import time

        import torch

        gen = torch.Generator().manual_seed(0)
        weights = [torch.randn(shape, generator=gen, requires_grad=True) * 0.1
                   for _ in range(layers) for shape in ((width, 4 * width), (4 * width, width))]
        weights = [w.detach().requires_grad_() for w in weights]
        x = torch.randn(tokens, width, generator=gen)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # like a rank
        try:
            best = math.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                h = x
                for w_in, w_out in zip(weights[::2], weights[1::2]):
                    h = h + torch.nn.functional.gelu(h @ w_in) @ w_out  # (tokens, width)
                h.square().mean().backward()
                best = min(best, time.perf_counter() - t0)
        finally:
            torch.set_num_threads(threads)
        psi = sum(w.numel() for w in weights)
        _CPU_FLOPS[key] = 6 * psi * tokens / best
    return _CPU_FLOPS[key]


def cpu_flops_line() -> str:
    """'this machine: 9.3 GFLOP/s (...; measured on this machine this run)', for a chapter to print."""
    return (f"this machine: {cpu_flops() / 1e9:.1f} GFLOP/s (forward + backward of the tiny GPT's "
            "MLP shapes, one thread; measured on this machine this run)")


# ----------------------------------------------------------------------------- edge (chapter 12)
# Kept apart from ACCELERATORS and REAL (the data-centre GPUs and their networks): a real edge
# device and the real wireless links between such devices, for chapter 12's split inference.
EDGE_DEVICES: dict[str, Accelerator] = {
    # NVIDIA Jetson Nano module datasheet: 128-core Maxwell GPU at 921.6 MHz,
    # "472 GFLOPs" (fp16), 4 GB 64-bit LPDDR4 at 25.6 GB/s, Gigabit Ethernet. fp32 peak is half the
    # fp16 one: 128 cores × 921.6 MHz × 2 = 236 GFLOP/s; sustained taken as ~50% of it, as the
    # discrete GPUs above (~40-48%); launch cost the discrete GPUs' (`LAUNCH_S`), a simplification.
    "Jetson-Nano": Accelerator("Jetson Nano", 118e9, "~50% of its 236 GFLOP/s fp32 peak (472 fp16)",
                               memory_bytes=4e9, inter="1GbE", peak_flops=472e9, hbm_Bps=25.6e9),
}
WIRELESS: dict[str, Link] = {
    # IEEE 802.11n-2009 (802.11-2012 Table 20-30): one spatial stream, 20 MHz, MCS 7, 800 ns guard
    # interval: 65 Mbit/s PHY rate (an upper bound on goodput). α = 2 ms per message round is our
    # assumption for an idle WLAN (the standard fixes rates, not latency; busy networks measure
    # more: Sui et al., "Characterizing and Improving WiFi Latency", MobiSys 2016).
    "802.11n": Link(2e-3, 65e6 / 8, "Wi-Fi 802.11n (1 stream, 20 MHz, MCS 7: 65 Mbit/s PHY)"),
    # Bluetooth Core Specification 5.0: LE 2M PHY, 2 Mbit/s symbol rate (an upper bound on
    # goodput); a message waits for the next connection event: α = 15 ms, the shortest connection
    # interval Apple's "Accessory Design Guidelines for Apple Devices" allow (the spec's 7.5 ms
    # minimum is rarely granted).
    "BLE-2M": Link(15e-3, 2e6 / 8, "Bluetooth 5 LE 2M PHY (2 Mbit/s, 15 ms connection interval)"),
}
