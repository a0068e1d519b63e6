"""A small 3-D U-Net (Çiçek et al., "3D U-Net", MICCAI 2016) for the synthetic volumes of
`parlab.models.volumes`: the model LAMP pipelines (Zhu et al., "LAMP: Large Deep Nets with
Automated Model Parallelism for Image Segmentation", MICCAI 2020).

A flat list of `layers`, each `layer(x, skip) -> (x, skip made)`, so a pipeline cuts it into
contiguous stages; skip k made by `Down(k)` is concatenated by `Up(k)` 2(L−1−k) layers later,
possibly stages away (`parlab.pipeline.unet_stages`).

    Down(0) … Down(L−2)  Bottom  Up(L−2) … Up(0)  Head     (2L layers, L = levels)
    channels base·2^k at level k, side block_size / 2^k

Every operation is per sample (no batch norm), so any split of the batch computes what the whole
batch computes. In full: docs/models.md, `parlab.models.unet3d`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.models.base import ConfiguredModel
from parlab.models.checks import require_positive_ints
from parlab.models.data import volume_crops_batch
from parlab.models.gpt import maybe_checkpoint
from parlab.models.spec import ModelSpec, register_model


@dataclass(frozen=True)
class UNet3DConfig:
    levels: int = 3  # resolutions; 2·levels layers
    base: int = 4  # channels at level 0 (base·2^k at level k)
    block_size: int = 16  # side of the training block (voxels): the data's crop
    in_channels: int = 1
    n_classes: int = 3  # background, ball, cube

    def validate(self) -> None:
        require_positive_ints(self)
        if self.levels < 2:
            raise ValueError(f"UNet3DConfig.levels={self.levels} must be >= 2 (one skip at least)")
        if self.block_size % 2 ** (self.levels - 1):
            raise ValueError(f"UNet3DConfig.block_size={self.block_size} must be divisible by "
                             f"2^(levels-1) = {2 ** (self.levels - 1)} (levels={self.levels})")
        if self.block_size > 32:
            raise ValueError(f"UNet3DConfig.block_size={self.block_size} must be <= 32, the side of "
                             "the training volumes (data/volumes.npz)")
        if self.in_channels != 1 or self.n_classes != 3:
            raise ValueError(f"UNet3DConfig in_channels={self.in_channels}, n_classes="
                             f"{self.n_classes} must be 1 and 3: the volumes' channels and classes")

    def channels(self, level: int) -> int:
        return self.base * 2 ** level


class ConvBlock(nn.Module):
    """Two 3×3×3 convolutions, each followed by ReLU (3D U-Net's unit, without batch norm)."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv1 = nn.Conv3d(c_in, c_out, 3, padding=1)
        self.conv2 = nn.Conv3d(c_out, c_out, 3, padding=1)

    def forward(self, x):
        return F.relu(self.conv2(F.relu(self.conv1(x))))  # (B, c_out, D, H, W)


class Down(nn.Module):
    """Encoder level k: convolve (the result is skip k), halve the side."""

    makes, takes = True, False

    def __init__(self, level: int, c_in: int, c_out: int):
        super().__init__()
        self.level, self.block = level, ConvBlock(c_in, c_out)

    def forward(self, x, skip=None):
        h = self.block(x)  # (B, c_k, S/2^k, ., .)
        return F.max_pool3d(h, 2), h  # (B, c_k, S/2^(k+1), ., .), skip k


class Bottom(nn.Module):
    makes, takes = False, False

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.block = ConvBlock(c_in, c_out)

    def forward(self, x, skip=None):
        return self.block(x), None  # (B, c_{L-1}, S/2^(L-1), ., .)


class Up(nn.Module):
    """Decoder level k: double the side, concatenate skip k, convolve."""

    makes, takes = False, True

    def __init__(self, level: int, c_in: int, c_out: int):
        super().__init__()
        self.level = level
        self.up = nn.ConvTranspose3d(c_in, c_out, 2, stride=2)
        self.block = ConvBlock(2 * c_out, c_out)

    def forward(self, x, skip=None):
        x = self.up(x)  # (B, c_k, S/2^k, ., .)
        return self.block(torch.cat([x, skip], dim=1)), None  # (B, 2c_k → c_k, S/2^k, ., .)


class Head(nn.Module):
    makes, takes = False, False

    def __init__(self, c_in: int, classes: int):
        super().__init__()
        self.conv = nn.Conv3d(c_in, classes, 1)

    def forward(self, x, skip=None):
        return self.conv(x), None  # (B, classes, S, S, S)


class UNet3D(ConfiguredModel):
    """`layers`: Down(0..L−2), Bottom, Up(L−2..0), Head; `loss`: voxel-mean cross-entropy."""

    def __init__(self, cfg: UNet3DConfig, seed: int = 0):
        super().__init__(cfg)
        L, c = cfg.levels, cfg.channels
        layers: list[nn.Module] = []
        for k in range(L - 1):
            layers.append(Down(k, cfg.in_channels if k == 0 else c(k - 1), c(k)))
        layers.append(Bottom(c(L - 2), c(L - 1)))
        for k in reversed(range(L - 1)):
            layers.append(Up(k, c(k + 1), c(k)))
        layers.append(Head(c(0), cfg.n_classes))
        self.layers = nn.ModuleList(layers)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # He initialisation, in parameter order, from the seed
            for m in self.modules():
                if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)):
                    fan_in = m.weight[0].numel() if isinstance(m, nn.Conv3d) else \
                        m.weight.size(0) * m.weight[0, 0].numel()
                    m.weight.normal_(0.0, math.sqrt(2.0 / fan_in), generator=g)
                    m.bias.zero_()

    def run_layers(self, x, skips: dict, lo: int, hi: int):
        """Layers [lo, hi) on x with the skips in flight (a pipeline stage's forward)."""
        for layer in self.layers[lo:hi]:
            skip = skips.pop(layer.level) if layer.takes else None  # (B, c_k, S/2^k, ., .)
            x, made = maybe_checkpoint(layer, self.activation_checkpointing, x, skip)
            if layer.makes:
                skips[layer.level] = made  # (B, c_k, S/2^k, ., .) until Up(k)
        return x

    def forward(self, x):
        return self.run_layers(x, {}, 0, len(self.layers))  # (B, classes, S, S, S)

    def loss(self, x, targets):
        return F.cross_entropy(self(x), targets)  # mean over every voxel of the batch


# ----------------------------------------------------------------------------- counts, registration
def param_count(cfg: UNet3DConfig) -> int:
    """Parameters of the U-Net, from the config alone: every convolution's weight and bias."""
    c, L = cfg.channels, cfg.levels
    conv = lambda a, b, k=3: k ** 3 * a * b + b  # noqa: E731  (a Conv3d's weight and bias)
    total = sum(conv(cfg.in_channels if k == 0 else c(k - 1), c(k)) + conv(c(k), c(k))
                for k in range(L - 1))
    total += conv(c(L - 2), c(L - 1)) + conv(c(L - 1), c(L - 1))  # the bottom
    total += sum(conv(c(k + 1), c(k), 2) + conv(2 * c(k), c(k)) + conv(c(k), c(k))
                 for k in range(L - 1))  # up-convolution, then the block on [up, skip]
    return total + conv(c(0), cfg.n_classes, 1)


def activation_count(cfg: UNet3DConfig, batch_size: int) -> int:
    """A generous count of the elements a forward over `batch_size` volumes saves: 12 per element
    of each level's feature maps, 10 per voxel of the batch at full resolution."""
    voxels = lambda k: batch_size * (cfg.block_size // 2 ** k) ** 3  # noqa: E731
    return (12 * sum(cfg.channels(k) * voxels(k) for k in range(cfg.levels))
            + 10 * batch_size * cfg.block_size ** 3)


register_model(ModelSpec("unet3d", UNet3DConfig, UNet3D, param_count, activation_count,
                         volume_crops_batch))
