"""What a pipelined 3-D U-Net sends and holds, in closed form (Zhu et al., LAMP, MICCAI 2020).

Main path: the boundary after stage s carries layer hi_s−1's output, rows·c·side³ fp32 numbers
per step (all micro-batches together: they partition the replica's rows), forward from stage s,
its gradient back from stage s+1 (`parlab.pipeline.unet_stages.layer_output_shape`).

Skips: skip k is Down(k)'s output, rows·(base·2^k)·(S/2^k)³ = rows·base·S³/4^k numbers — level 0
dominates: the skips cost ≈ 4/3 × skip 0. A skip that leaves its stage is sent once forward by its
producer stage and its gradient once back by its consumer stage, whatever the number of stages in
between (`skip_routes`): a transformer pipeline has no such message. Relayed stage by stage
instead, it would cost (consumer − producer) times as much — `relayed_skip_bytes`.

Parameters per stage: 3×3×3 convolutions (27·c_in·c_out + c_out), the transposed 2×2×2
convolution (8·c_in·c_out + c_out), the 1×1×1 head — `stage_params`: LAMP's point is that a stage
holds 1/p of the model *and* of its activations, so a larger model or input fits per device.
"""

from __future__ import annotations

import math

from parlab.pipeline.stages import stage_bounds
from parlab.pipeline.unet_stages import layer_output_shape, skip_routes, skip_shape

FP32 = 4


def main_bytes_per_step(cfg, counts: list[int], rows: int, stage: int) -> tuple[int, int]:
    """(forward bytes sent, backward bytes sent) on the main path by `stage` in one step."""
    lo, hi = stage_bounds(counts)[stage]
    fwd = FP32 * math.prod(layer_output_shape(cfg, hi - 1, rows)) if stage < len(counts) - 1 else 0
    bwd = FP32 * math.prod(layer_output_shape(cfg, lo - 1, rows)) if stage > 0 else 0
    return fwd, bwd


def skip_bytes_per_step(cfg, counts: list[int], rows: int, stage: int) -> tuple[int, int]:
    """(skip bytes sent forward, skip-gradient bytes sent backward) by `stage` in one step."""
    routes = skip_routes(cfg.levels, counts)
    fwd = sum(FP32 * math.prod(skip_shape(cfg, k, rows)) for k, p, _ in routes if p == stage)
    bwd = sum(FP32 * math.prod(skip_shape(cfg, k, rows)) for k, _, c in routes if c == stage)
    return fwd, bwd


def relayed_skip_bytes(cfg, counts: list[int], rows: int) -> tuple[int, int]:
    """(forward skip bytes of all stages sent straight, the same relayed stage by stage) per step."""
    routes = skip_routes(cfg.levels, counts)
    one = {k: FP32 * math.prod(skip_shape(cfg, k, rows)) for k, _, _ in routes}
    return sum(one.values()), sum(one[k] * (c - p) for k, p, c in routes)


def layer_params(cfg) -> list[int]:
    """Parameters of every U-Net layer (Down(0..L−2), Bottom, Up(L−2..0), Head)."""
    L, c = cfg.levels, cfg.channels

    def conv(a, b, kernel):
        return kernel * a * b + b

    counts = [conv(cfg.in_channels if k == 0 else c(k - 1), c(k), 27) + conv(c(k), c(k), 27)
              for k in range(L - 1)]
    counts.append(conv(c(L - 2), c(L - 1), 27) + conv(c(L - 1), c(L - 1), 27))
    counts += [conv(c(k + 1), c(k), 8) + conv(2 * c(k), c(k), 27) + conv(c(k), c(k), 27)
               for k in reversed(range(L - 1))]
    counts.append(conv(c(0), cfg.n_classes, 1))
    return counts


def stage_params(cfg, counts: list[int]) -> list[int]:
    """Parameters each stage holds."""
    per_layer = layer_params(cfg)
    return [sum(per_layer[lo:hi]) for lo, hi in stage_bounds(counts)]


def feature_numbers(cfg, rows: int) -> int:
    """Numbers in every layer's output and every skip for `rows` samples: activations scale with
    rows·S³ (the input), which is why a whole volume may not fit on one device."""
    outs = sum(math.prod(layer_output_shape(cfg, j, rows)) for j in range(2 * cfg.levels))
    return outs + sum(math.prod(skip_shape(cfg, k, rows)) for k in range(cfg.levels - 1))
