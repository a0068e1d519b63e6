"""A small MLP on the spirals dataset (`parlab.models.data.spirals`), deterministic from a seed: the
second model every data-parallel, ZeRO and pipeline scheme trains (its `layers` split easily)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.models.base import ConfiguredModel
from parlab.models.checks import require_positive_ints
from parlab.models.data import spirals_batch
from parlab.models.gpt import _init_linear, maybe_checkpoint
from parlab.models.spec import ModelSpec, register_model


@dataclass(frozen=True)
class MLPConfig:
    d_in: int = 2
    d_hidden: int = 64
    n_layer: int = 4  # hidden layers
    d_out: int = 3

    def validate(self) -> None:
        require_positive_ints(self)
        if self.d_in != 2:
            raise ValueError(f"MLPConfig.d_in={self.d_in} must be 2: the spirals are 2-D points")
        if self.d_out < 3:
            raise ValueError(f"MLPConfig.d_out={self.d_out} must be >= 3: the spirals have 3 classes")


class MLP(ConfiguredModel):
    """d_in → [Linear, GELU] × n_layer → d_out; `layers` is a flat ModuleList (easy to split)."""

    def __init__(self, cfg: MLPConfig, seed: int = 0):
        super().__init__(cfg)
        dims = [cfg.d_in] + [cfg.d_hidden] * cfg.n_layer + [cfg.d_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        g = torch.Generator().manual_seed(seed)
        for layer in self.layers:
            _init_linear(layer, g, std=1.0 / math.sqrt(layer.in_features))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            if i < len(self.layers) - 1:
                x = maybe_checkpoint(_linear_gelu, self.activation_checkpointing, layer, x)  # (B, d)
            else:
                x = layer(x)  # (B, d_out)
        return x

    def loss(self, x, targets):
        return F.cross_entropy(self(x).float(), targets)  # fp32 loss also in mixed precision


def _linear_gelu(layer, x):
    return F.gelu(layer(x))


def param_count(cfg: MLPConfig) -> int:
    """Parameters of the MLP, from the config alone: each Linear's weight and bias."""
    dims = [cfg.d_in] + [cfg.d_hidden] * cfg.n_layer + [cfg.d_out]
    return sum(a * b + b for a, b in zip(dims[:-1], dims[1:]))


def activation_count(cfg: MLPConfig, batch_size: int) -> int:
    """A generous count of the elements a forward over `batch_size` rows saves."""
    return batch_size * (cfg.d_in + 2 * cfg.n_layer * cfg.d_hidden + 3 * cfg.d_out)


register_model(ModelSpec("mlp", MLPConfig, MLP, param_count, activation_count, spirals_batch))
