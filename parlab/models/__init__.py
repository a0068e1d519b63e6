"""The models every scheme trains, by name: `gpt` (a tiny nanoGPT), `mlp` (spirals), `unet3d` (a 3-D
U-Net on synthetic volumes, `parlab.models.volumes`), and the video
denoiser of chapter 06 (`parlab.context_parallel.video_denoiser`); `data` makes every step's global batch.

`build_model(name, cfg, seed)` creates parameters in a fixed order from the seed, so every rank of
every scheme starts from the reference's weights.
"""

from __future__ import annotations

from dataclasses import fields

import torch.nn as nn

from parlab.models.gpt import GPT, Block, CausalSelfAttention, GPTConfig, attention, maybe_checkpoint
from parlab.models.gpt_moe import GPTMoE, GPTMoEConfig
from parlab.models.mlp import MLP, MLPConfig
from parlab.models.unet3d import UNet3D, UNet3DConfig

__all__ = ["GPT", "GPTMoE", "GPTMoEConfig", "MLP", "MODELS", "Block", "CausalSelfAttention", "GPTConfig",
           "MLPConfig", "UNet3D", "UNet3DConfig", "attention", "build_model", "maybe_checkpoint",
           "model_config"]

MODELS = {"gpt": (GPT, GPTConfig), "mlp": (MLP, MLPConfig), "gpt-moe": (GPTMoE, GPTMoEConfig),
          "unet3d": (UNet3D, UNet3DConfig)}


def model_config(name: str, overrides: dict | None = None):
    """The config of model `name` with `overrides`; ValueError names an unknown model or field."""
    if name not in MODELS:
        raise ValueError(f"model={name!r} is unknown; choose one of {sorted(MODELS)}")
    cls = MODELS[name][1]
    overrides = dict(overrides or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"model_config keys {unknown} are unknown for model={name!r}; "
                         f"known: {sorted(known)}")
    cfg = cls(**overrides)
    cfg.validate()
    return cfg


# models whose blocks cannot be recomputed in backward (a recomputed MoE block would route again)
NO_CHECKPOINTING = ("gpt-moe",)


def check_checkpointing(name: str, checkpoint: bool) -> None:
    """ValueError before any process starts when `checkpoint=True` meets a model that refuses it."""
    if checkpoint and name in NO_CHECKPOINTING:
        raise ValueError(f"checkpoint=True is not supported by model={name!r} (recomputing a "
                         "block would route its tokens again)")


def build_model(name: str, cfg, seed: int, checkpoint: bool = False) -> nn.Module:
    model = MODELS[name][0](cfg, seed=seed)
    model.activation_checkpointing = checkpoint
    return model

