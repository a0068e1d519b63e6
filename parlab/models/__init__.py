"""The models every scheme trains, by name: `gpt` (a tiny nanoGPT), `mlp` (spirals), `unet3d` (a 3-D
U-Net on synthetic volumes, `parlab.models.volumes`), `op-graph` (chapter 13's branchy operator
graph, `parlab.models.op_graph`), and the video
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
from parlab.models.op_graph import OpGraphConfig, OpGraphModel
from parlab.models.unet3d import UNet3D, UNet3DConfig

__all__ = ["GPT", "GPTMoE", "GPTMoEConfig", "MLP", "MODELS", "Block", "CausalSelfAttention", "GPTConfig",
           "MLPConfig", "UNet3D", "UNet3DConfig", "attention", "build_model", "maybe_checkpoint",
           "model_config"]

MODELS = {"gpt": (GPT, GPTConfig), "mlp": (MLP, MLPConfig), "gpt-moe": (GPTMoE, GPTMoEConfig),
          "unet3d": (UNet3D, UNet3DConfig), "op-graph": (OpGraphModel, OpGraphConfig)}


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



# ----------------------------------------------------------------------------- what a run needs
def param_count(name: str, cfg) -> int:
    """Parameters of model `name` under `cfg`, from the config alone (no tensor is made): the
    same count as `sum(p.numel() for p in build_model(name, cfg, 0).parameters())`, tested."""
    if name == "op-graph":
        from parlab.models.op_graph import param_count as op_graph_params
        return op_graph_params(cfg)
    if name == "mlp":
        dims = [cfg.d_in] + [cfg.d_hidden] * cfg.n_layer + [cfg.d_out]
        return sum(a * b + b for a, b in zip(dims[:-1], dims[1:]))
    if name == "unet3d":
        c, L = cfg.channels, cfg.levels
        conv = lambda a, b, k=3: k ** 3 * a * b + b  # noqa: E731  (a Conv3d's weight and bias)
        total = sum(conv(cfg.in_channels if k == 0 else c(k - 1), c(k)) + conv(c(k), c(k))
                    for k in range(L - 1))
        total += conv(c(L - 2), c(L - 1)) + conv(c(L - 1), c(L - 1))  # the bottom
        total += sum(conv(c(k + 1), c(k), 2) + conv(2 * c(k), c(k)) + conv(c(k), c(k))
                     for k in range(L - 1))  # up-convolution, then the block on [up, skip]
        return total + conv(c(0), cfg.n_classes, 1)
    C = cfg.n_embd
    total = cfg.vocab_size * C + cfg.block_size * C + 2 * C  # wte (tied head), wpe, ln_f
    block = 4 * C + 4 * C * C  # two LayerNorms, attention's c_attn and c_proj
    if name == "gpt-moe":
        moe = cfg.n_layer // cfg.moe_every
        expert = 2 * cfg.n_experts * C * cfg.hidden + C * cfg.n_experts  # w_in, w_out, router
        expert += 8 * C * C if cfg.shared_expert else 0
        return total + cfg.n_layer * block + moe * expert + (cfg.n_layer - moe) * 8 * C * C
    return total + cfg.n_layer * (block + 8 * C * C)


def activation_count(name: str, cfg, batch_size: int) -> int:
    """A generous count of the elements a forward over `batch_size` rows saves for backward (and
    the transient logits and attention scores), on one process holding the whole model: every
    intermediate of a block kept, no activation checkpointing. An estimate to refuse what cannot
    fit, not the measured figure (`ActivationMeter`) nor chapter 03's exact count."""
    B = batch_size
    if name == "op-graph":
        from parlab.models.op_graph import activation_count as op_graph_activations
        return op_graph_activations(cfg, B)
    if name == "mlp":
        return B * (cfg.d_in + 2 * cfg.n_layer * cfg.d_hidden + 3 * cfg.d_out)
    if name == "unet3d":
        voxels = lambda k: B * (cfg.block_size // 2 ** k) ** 3  # noqa: E731
        return (12 * sum(cfg.channels(k) * voxels(k) for k in range(cfg.levels))
                + 10 * B * cfg.block_size ** 3)
    C, T = cfg.n_embd, cfg.block_size
    tokens = B * T
    per_block = 20 * tokens * C + 3 * B * cfg.n_head * T * T + T * T  # + scores, softmax, mask
    total = 2 * tokens * C + 3 * tokens * cfg.vocab_size + cfg.n_layer * per_block
    if name == "gpt-moe":
        routed = tokens * cfg.top_k * (2 * C + 2 * cfg.hidden) + 3 * tokens * cfg.n_experts
        total += (cfg.n_layer // cfg.moe_every) * (routed + 8 * tokens * C)
    return total
