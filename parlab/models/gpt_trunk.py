"""The GPT's trunk outside its blocks' insides, written once for every GPT (the reference
`parlab.models.gpt.GPT`, also as the chapters parallelise it; HAP's and torch-TP's GPTs; the
planner's profiles).

nanoGPT's `model.py` (GPT-2, Radford et al. 2019): token (+ learned position) embeddings, the
blocks in order (each optionally recomputed in backward), a final norm and the head tied to the
token embedding (Press & Wolf 2017), the mean next-token cross-entropy. Each function runs the
operators the copies wrote out, in the same order, so every paced price stays what it was.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as _checkpoint


def maybe_checkpoint(fn, enabled: bool, *args):
    """fn(*args); with `enabled` (and grad on), activation checkpointing: keep only the inputs,
    recompute fn's activations in backward (Chen et al. 2016, "Training Deep Nets with Sublinear
    Memory Cost"), non-reentrant so it composes with hooks and saved-tensor hooks."""
    if enabled and torch.is_grad_enabled():
        return _checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def run_blocks(blocks, x, checkpoint: bool = False):
    """x through each block in order, each checkpointed when `checkpoint`: (B, T, C) -> (B, T, C)."""
    for block in blocks:
        x = maybe_checkpoint(block, checkpoint, x)  # (B, T, C)
    return x


def embed_tokens(model, idx, positions=None):
    """A GPT-shaped model's input: wte(idx), + wpe(positions) with learned positions (`positions`:
    (T,), default 0..T−1); with RoPE the positions enter inside attention: (B, T) -> (B, T, C)."""
    if model.config.positions == "rope":  # q, k rotated in attention: no position table
        return model.wte(idx)  # (B, T, C)
    tokens = model.wte(idx)  # (B, T, C), looked up before the positions are made, as always
    return tokens + model.wpe(torch.arange(idx.size(1)) if positions is None else positions)


def tied_head(ln_f: nn.Module, wte: nn.Embedding, x):
    """The head tied to the token embedding (Press & Wolf 2017, "Using the Output Embedding to
    Improve Language Models"; GPT-2's, nanoGPT's): ln_f(x) @ wteᵀ, (B, T, C) -> (B, T, vocab)."""
    return ln_f(x) @ wte.weight.t()  # (B, T, vocab)


def head_logits(model, x):
    """A GPT-shaped model's head on the last block's output: `lm_head(ln_f(x))` with an own head
    (tie_head=False), else the tied head: (B, T, C) -> (B, T, vocab)."""
    if not model.config.tie_head:
        return model.lm_head(model.ln_f(x))  # (B, T, vocab), its own weights
    return tied_head(model.ln_f, model.wte, x)  # (B, T, vocab), tied to the embedding


def mean_token_loss(logits, targets):
    """Mean next-token cross-entropy, in fp32 also in mixed precision: (B, T, vocab), (B, T) -> ()."""
    logits = logits.float()  # (B, T, vocab)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
