"""The skip-connection ablation of subnetwork data parallelism: the same GPT with every block's
residual connections removed, x ← mlp(ln₂(attn(ln₁(x)))) instead of x ← x + attn(ln₁(x)), then
+ mlp(ln₂(x)). Singh, Khalid, Oyallon, Belilovsky ("Model Parallelism With Subnetwork Data
Parallelism", 2025) explain why forward-masked block-level subnetworks train well: a skipped
residual block leaves x + f(x) → x, a small change of the function, so the subnetwork's gradient
stays aligned with the full model's; without the skip a removed block replaces f(x) by x, a
different function. Removing the skips on the same model and task tests that explanation.
"""

from __future__ import annotations

import types

import torch.nn as nn

from parlab.subnet.ownership import find_blocks


def _no_skip(block, x):
    x = block.attn(block.ln_1(x))  # (B, T, C): no "x +"
    return block.mlp(block.ln_2(x))  # (B, T, C)


def remove_skips(model: nn.Module) -> nn.Module:
    """In place: every block of `model` (the GPT's `Block`s) computes without its residual
    connections. Returns `model`."""
    list_name, indices = find_blocks(model)
    blocks = dict(model.named_modules())[list_name]
    for i in indices:
        if not hasattr(blocks[i], "residuals"):
            raise ValueError(f"block {i} of {type(model).__name__} has no residuals to remove")
        blocks[i].residuals = types.MethodType(_no_skip, blocks[i])
    return model
