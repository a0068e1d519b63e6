"""The models every scheme trains, by name: `gpt` (a tiny nanoGPT), `mlp` (spirals), `unet3d` (a 3-D
U-Net on synthetic volumes, `parlab.models.volumes`), `op-graph` (chapter 13's branchy operator
graph, `parlab.models.op_graph`), `gpt-moe` (the GPT with mixture-of-experts MLPs), and the video
denoiser of chapter 06 (`parlab.context_parallel.video_denoiser`); `data` makes every step's global batch.

Each model module registers its `ModelSpec` (`parlab.models.spec`): config class, builder,
parameter and activation counts, dataset, checkpointing. Importing this package imports every
model module, so the registry `SPECS` is complete; the functions below look a name up there
(an unknown name is a ValueError naming it and the known models) and branch on no name.

`build_model(name, cfg, seed)` creates parameters in a fixed order from the seed, so every rank of
every scheme starts from the reference's weights.
"""

from __future__ import annotations

from dataclasses import fields

import torch.nn as nn

from parlab.models.gpt import GPT, Block, CausalSelfAttention, GPTConfig, attention, maybe_checkpoint
from parlab.models.gpt_moe import GPTMoE, GPTMoEConfig
from parlab.models.mlp import MLP, MLPConfig
from parlab.models.op_graph import OpGraphConfig, OpGraphModel
from parlab.models.spec import SPECS, ModelSpec, model_spec
from parlab.models.unet3d import UNet3D, UNet3DConfig

__all__ = ["GPT", "GPTMoE", "GPTMoEConfig", "MLP", "SPECS", "Block", "CausalSelfAttention", "GPTConfig",
           "MLPConfig", "ModelSpec", "OpGraphConfig", "OpGraphModel", "UNet3D", "UNet3DConfig",
           "activation_count", "attention", "build_model", "check_checkpointing", "maybe_checkpoint",
           "model_config", "model_spec", "param_count"]


def model_config(name: str, overrides: dict | None = None):
    """The config of model `name` with `overrides`; ValueError names an unknown model or field."""
    cls = model_spec(name).config
    overrides = dict(overrides or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"model_config keys {unknown} are unknown for model={name!r}; "
                         f"known: {sorted(known)}")
    cfg = cls(**overrides)
    cfg.validate()
    return cfg


def check_checkpointing(name: str, checkpoint: bool) -> None:
    """ValueError before any process starts when `checkpoint=True` meets a model that refuses it
    (its spec's `no_checkpointing` says why)."""
    refused = model_spec(name).no_checkpointing
    if checkpoint and refused:
        raise ValueError(f"checkpoint=True is not supported by model={name!r} ({refused})")


def build_model(name: str, cfg, seed: int, checkpoint: bool = False) -> nn.Module:
    """Model `name` under `cfg`, its parameters drawn from `seed`; `checkpoint` turns on
    activation checkpointing (the model refuses it where its spec does)."""
    model = model_spec(name).model(cfg, seed=seed)
    model.activation_checkpointing = checkpoint
    return model


# ----------------------------------------------------------------------------- what a run needs
def param_count(name: str, cfg) -> int:
    """Parameters of model `name` under `cfg`, from the config alone (no tensor is made): the
    same count as `sum(p.numel() for p in build_model(name, cfg, 0).parameters())`, tested."""
    return model_spec(name).param_count(cfg)


def activation_count(name: str, cfg, batch_size: int) -> int:
    """A generous count of the elements a forward over `batch_size` rows saves for backward (and
    the transient logits and attention scores), on one process holding the whole model: every
    intermediate of a block kept, no activation checkpointing. An estimate to refuse what cannot
    fit, not the measured figure (`ActivationMeter`) nor chapter 03's exact count."""
    return model_spec(name).activation_count(cfg, batch_size)
