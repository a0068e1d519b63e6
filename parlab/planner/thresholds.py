"""Closed-form thresholds: when data, fully sharded and tensor parallelism are compute-bound.

Austin et al., "How to Scale Your Model" (the scaling-book, Google DeepMind 2025), training chapter:
a sharding is compute-bound when a device's FLOPs per step outlast the bytes it moves, i.e. past a
ratio of the shapes to F/β (FLOPs per byte of link). Derived here per device in our α-β notation
(F sustained FLOP/s, β bytes/s one direction, b bytes per value: bf16 b = 2, T tokens per step):
- DP: the gradient all-reduce (ring: 2·b·P bytes) hides behind the backward (4·T·P FLOPs):
  T > (b/2)·F/β (the book's B/X > C/W_ici at b = 2). tp and pp divide P and FLOPs alike: T is a
  data-parallel replica's tokens per step.
- FSDP (ZeRO-3): forward all-gather (b·P) behind the forward (2·T·P); backward all-gather and
  reduce-scatter (2·b·P) behind the backward (4·T·P): the same T > (b/2)·F/β.
- TP (Megatron, Shoeybi et al. 2019): per layer and token forward, 2·(4d² + 2·d·d_ff)/tp FLOPs vs
  two all-reduces of d·b bytes (2·d·b each on the ring): tp < (2d + d_ff)·β/(b·F), T cancels;
  the MLP alone gives tp < 2·d_ff·β/(b·F) (the book's Y < F·W_ici/C at b = 2).
Simplifications, named: α ignored; communication perfectly overlapped; ring (N−1)/N → 1; attention
scores (s²) and the head's FLOPs ignored; pipeline messages ignored.
"""

from __future__ import annotations

import math

BF16 = 2  # bytes per parameter / activation value


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={value!r} must be a finite number > 0")
    return float(value)


def dp_min_tokens_per_device(flops: float, beta: float, bytes_per_param: float = BF16) -> float:
    """Tokens per data-parallel replica per step above which DP is compute-bound: (b/2)·F/β."""
    f, bw, b = _positive("flops", flops), _positive("beta", beta), _positive(
        "bytes_per_param", bytes_per_param)
    return 2 * b / 4 * f / bw  # all-reduce 2·b·P bytes ÷ backward 4·T·P FLOPs


def fsdp_min_tokens_per_device(flops: float, beta: float, bytes_per_param: float = BF16) -> float:
    """FSDP/ZeRO-3's bound, the larger of its two passes: forward b·P vs 2·T·P, backward 2·b·P vs
    4·T·P — both (b/2)·F/β."""
    f, bw, b = _positive("flops", flops), _positive("beta", beta), _positive(
        "bytes_per_param", bytes_per_param)
    return max(b / 2 * f / bw, 2 * b / 4 * f / bw)


def tp_max_degree(d_model: int, d_ff: int, flops: float, beta: float,
                  bytes_per_value: float = BF16, attention: bool = True) -> float:
    """The largest tensor-parallel degree that stays compute-bound (a real number: compare tp ≤ it):
    (2·d + d_ff)·β/(b·F) for a layer (attention projections and MLP), 2·d_ff·β/(b·F) for the MLP
    alone (`attention=False`)."""
    d, ff = _positive("d_model", d_model), _positive("d_ff", d_ff)
    f, bw, b = _positive("flops", flops), _positive("beta", beta), _positive(
        "bytes_per_value", bytes_per_value)
    if attention:  # FLOPs 2·(4d² + 2·d·d_ff) per token ÷ bytes 2 all-reduces × 2·d·b
        return 2 * (4 * d * d + 2 * d * ff) * bw / (4 * d * b * f)
    return 2 * 2 * d * ff * bw / (2 * d * b * f)  # 2 matmuls × 2·d·d_ff ÷ 1 all-reduce × 2·d·b


def preset_widths(preset: str) -> tuple[int, int]:
    """(d_model, d_ff) of a preset (d_ff = 4·d unless the preset names it); ValueError names it."""
    from parlab.models.presets import PRESETS

    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"preset={preset!r} must be one of {sorted(PRESETS)}")
    c = PRESETS[preset]
    return c["n_embd"], c.get("d_ff") or 4 * c["n_embd"]


def links_of(accelerator: str) -> dict[str, tuple[str, float]]:
    """{"NVLink": (name, β), "InfiniBand": (name, β)}: the accelerator's own NVLink generation and
    its cluster's InfiniBand per GPU, from `parlab.core.link`."""
    from parlab.core.link import ACCELERATORS, REAL

    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator={accelerator!r} must be one of {sorted(ACCELERATORS)}")
    acc = ACCELERATORS[accelerator]
    return {"NVLink": (acc.nvlink, REAL[acc.nvlink][1]), "InfiniBand": (acc.inter, REAL[acc.inter][1])}


def threshold_row(preset: str, accelerator: str, link: str) -> dict:
    """One row: F (the accelerator's sustained FLOP/s, the paced clock's), β, F/β and the three
    bounds for `preset` over `link` ("NVLink" or "InfiniBand")."""
    from parlab.core.link import ACCELERATORS

    links = links_of(accelerator)
    if link not in links:
        raise ValueError(f"link={link!r} must be one of {sorted(links)}")
    d, ff = preset_widths(preset)
    name, beta = links[link]
    flops = ACCELERATORS[accelerator].flops
    return {"preset": preset, "accelerator": accelerator, "link": name, "flops": flops,
            "beta": beta, "F_over_beta": flops / beta,
            "dp_min_tokens": dp_min_tokens_per_device(flops, beta),
            "fsdp_min_tokens": fsdp_min_tokens_per_device(flops, beta),
            "tp_max": tp_max_degree(d, ff, flops, beta),
            "tp_max_mlp": tp_max_degree(d, ff, flops, beta, attention=False)}


def threshold_table(preset: str = "megatron-1.7b", accelerators=("A100", "H100"),
                    links=("NVLink", "InfiniBand")) -> list[dict]:
    """`threshold_row` for every accelerator × link."""
    return [threshold_row(preset, a, k) for a in accelerators for k in links]


def plan_check(tp: int, dp: int, tokens_per_replica: float, dp_row: dict, tp_row: dict) -> dict:
    """A plan against the closed forms: DP over `dp_row`'s link, TP over `tp_row`'s (degree 1:
    no such communication, cleared)."""
    for name, v in (("tp", tp), ("dp", dp)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be an int >= 1")
    _positive("tokens_per_replica", tokens_per_replica)
    dp_ok = dp == 1 or tokens_per_replica >= dp_row["dp_min_tokens"]
    tp_ok = tp == 1 or tp <= tp_row["tp_max"]
    return {"dp_ok": dp_ok, "tp_ok": tp_ok, "compute_bound": dp_ok and tp_ok}
