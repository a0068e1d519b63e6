"""A 3-D U-Net cut into pipeline stages: contiguous runs of its layers, plus the skip connections
that leave one stage and land several stages later (Zhu et al., "LAMP: Large Deep Nets with
Automated Model Parallelism for Image Segmentation", MICCAI 2020: a U-Net's encoder and decoder
halves on different devices, its skips crossing between them).

The U-Net's layers (`parlab.models.unet3d`) run in order: Down(0) … Down(L−2), Bottom, Up(L−2) …
Up(0), Head. Down(k) is layer k and Up(k) is layer 2L−2−k, so skip k is produced in the stage
holding layer k and consumed in the stage holding layer 2L−2−k. A transformer pipeline passes one
tensor from stage s to s+1; a U-Net stage receives the main path from its predecessor *and* every
skip addressed to it from earlier stages, and sends each skip it produces straight to the stage
that concatenates it — not relayed through the stages in between (`skip_routes`). The routes,
shapes and bytes are pure functions of (levels, layers per stage), so `unet_cost` predicts every
message before it is sent.
"""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from parlab.pipeline.stages import stage_bounds


def n_layers(cfg) -> int:
    """Layers of the U-Net of config `cfg` (UNet3DConfig): 2·levels."""
    return 2 * cfg.levels


def stage_of_layer(counts: list[int]) -> list[int]:
    """The stage of every layer, for `counts` layers per stage."""
    return [s for s, c in enumerate(counts) for _ in range(c)]


def skip_routes(levels: int, counts: list[int]) -> list[tuple[int, int, int]]:
    """(level k, producer stage, consumer stage) of every skip that leaves its stage, by k."""
    where = stage_of_layer(counts)
    routes = [(k, where[k], where[2 * levels - 2 - k]) for k in range(levels - 1)]
    return [r for r in routes if r[1] != r[2]]


def layer_output_shape(cfg, layer: int, rows: int) -> tuple:
    """Shape of layer `layer`'s output (the main path) for `rows` samples."""
    L, S = cfg.levels, cfg.block_size
    if layer < L - 1:  # Down(k): pooled
        k = layer
        return (rows, cfg.channels(k)) + (S // 2 ** (k + 1),) * 3  # (mb, c_k, S/2^(k+1), ., .)
    if layer == L - 1:  # Bottom
        return (rows, cfg.channels(L - 1)) + (S // 2 ** (L - 1),) * 3
    if layer < 2 * L - 1:  # Up(k)
        k = 2 * L - 2 - layer
        return (rows, cfg.channels(k)) + (S // 2 ** k,) * 3  # (mb, c_k, S/2^k, ., .)
    return (rows, cfg.n_classes) + (S,) * 3  # Head: (mb, classes, S, S, S)


def skip_shape(cfg, level: int, rows: int) -> tuple:
    """Shape of skip `level` for `rows` samples: Down(k)'s output before pooling."""
    return (rows, cfg.channels(level)) + (cfg.block_size // 2 ** level,) * 3  # (mb, c_k, S/2^k, ., .)


class UNetStage(nn.Module):
    """Layers [lo, hi) of a U-Net; forward(x, skips_in) -> (x, skips_out).

    skips_in: {k: tensor} the skips this stage concatenates that were produced in earlier stages;
    skips_out: {k: tensor} the skips produced here that later stages concatenate. The stage
    registers the model's own layers, so its parameters are the reference's.
    """

    def __init__(self, model: nn.Module, index: int, counts: list[int]):
        super().__init__()
        self.index, self.first, self.last = index, index == 0, index == len(counts) - 1
        self.lo, self.hi = stage_bounds(counts)[index]
        self.layers = nn.ModuleList(model.layers[self.lo:self.hi])
        routes = skip_routes(model.config.levels, counts)
        self.skips_in = [k for k, _, c in routes if c == index]  # received, by k
        self.skips_out = [k for k, p, _ in routes if p == index]  # sent, by k
        self.producer = {k: p for k, p, c in routes if c == index}
        self.consumer = {k: c for k, p, c in routes if p == index}
        self._model = [model]  # not a submodule: parameters() stay the stage's own

    def forward(self, x, skips_in: dict):
        skips = dict(skips_in)
        x = self._model[0].run_layers(x, skips, self.lo, self.hi)  # (mb, c, s, s, s)
        return x, {k: skips.pop(k) for k in self.skips_out}

    def loss(self, output, targets):
        return F.cross_entropy(output, targets)  # voxel mean of this micro-batch


def keep_only(model: nn.Module, stage_ids: list[int], counts: list[int]) -> None:
    """Drop from `model` every layer that no local stage runs."""
    bounds = stage_bounds(counts)
    local = {i for s in stage_ids for i in range(*bounds[s])}
    for i in range(len(model.layers)):
        if i not in local:
            model.layers[i] = nn.Identity()


def build_stages(model: nn.Module, stage_ids: list[int], counts: list[int]) -> dict[int, UNetStage]:
    """{stage id: UNetStage} for this rank's stages, cut from `model` (which keeps only those)."""
    keep_only(model, stage_ids, counts)
    return {s: UNetStage(model, s, counts) for s in stage_ids}
