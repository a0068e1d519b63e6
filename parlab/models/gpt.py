"""The tiny GPT (nanoGPT-shaped) every scheme trains, deterministic from a seed.

The GPT follows Karpathy's nanoGPT `model.py` (itself GPT-2, Radford et al. 2019): token and
position embeddings, pre-LayerNorm blocks of causal self-attention and a 4× MLP with GELU, a
final LayerNorm and a head tied to the token embedding. Linear layers have no bias (nanoGPT's
`bias=False`): the key bias of attention has an exactly-zero gradient (softmax ignores a
constant shift), and Adam would turn the float noise in it into full-size updates. No dropout,
so that every parallel scheme can be compared with the single process exactly. Attention is written out (q·kᵀ,
mask, softmax, ·v) rather than calling a fused kernel, so tensor, sequence and context
parallelism can split it and the score matrix shows in the memory ledger.

Parameters are created in a fixed order from `torch.Generator().manual_seed(seed)`, so every
rank of every scheme starts from the same weights as the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as _checkpoint

from parlab.models.data import VOCAB


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 96  # printable ASCII + newline (parlab.models.data)
    block_size: int = 32  # sequence length T
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 32

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig.{f.name}={value!r} must be an int >= 1")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.vocab_size < len(VOCAB):  # a token id >= vocab_size would index past the embedding
            raise ValueError(f"GPTConfig.vocab_size={self.vocab_size} is below the {len(VOCAB)} "
                             "symbols of the text dataset")


def maybe_checkpoint(fn, enabled: bool, *args):
    """fn(*args); with `enabled` (and grad on), activation checkpointing: keep only the inputs,
    recompute fn's activations in backward (Chen et al. 2016, "Training Deep Nets with Sublinear
    Memory Cost"), non-reentrant so it composes with hooks and saved-tensor hooks."""
    if enabled and torch.is_grad_enabled():
        return _checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def _init_linear(linear: nn.Linear, generator: torch.Generator, std: float = 0.02) -> None:
    with torch.no_grad():
        linear.weight.normal_(0.0, std, generator=generator)
        if linear.bias is not None:
            linear.bias.zero_()


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 × (B, T, C)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        y = attention(q, k, v)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.c_proj(y)


def attention(q, k, v, causal: bool = True):
    """Softmax(q·kᵀ/√d)·v with a causal mask; q (B, nh, Tq, hs), k, v (B, nh, Tk, hs)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, nh, Tq, Tk)
    if causal:
        Tq, Tk = q.size(-2), k.size(-2)
        mask = torch.ones(Tq, Tk, dtype=torch.bool).tril(diagonal=Tk - Tq)  # (Tq, Tk)
        scores = scores.masked_fill(~mask, float("-inf"))
    return F.softmax(scores, dim=-1) @ v  # (B, nh, Tq, hs)


class MLPBlock(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLPBlock(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        return x + self.mlp(self.ln_2(x))  # (B, T, C)


class GPT(nn.Module):
    activation_checkpointing = False  # set by build_model(..., checkpoint=True)

    def __init__(self, cfg: GPTConfig, seed: int = 0):
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.wte.weight.normal_(0.0, 0.02, generator=g)
            self.wpe.weight.normal_(0.0, 0.02, generator=g)
        proj_std = 0.02 / math.sqrt(2 * cfg.n_layer)  # GPT-2's scaled residual init
        for block in self.blocks:
            _init_linear(block.attn.c_attn, g)
            _init_linear(block.attn.c_proj, g, proj_std)
            _init_linear(block.mlp.c_fc, g)
            _init_linear(block.mlp.c_proj, g, proj_std)

    def embed(self, idx):
        T = idx.size(1)
        return self.wte(idx) + self.wpe(torch.arange(T))  # (B, T, C)

    def head(self, x):
        return self.ln_f(x) @ self.wte.weight.t()  # (B, T, vocab), tied to the embedding

    def forward(self, idx):
        x = self.embed(idx)  # (B, T, C)
        for block in self.blocks:
            x = maybe_checkpoint(block, self.activation_checkpointing, x)  # (B, T, C)
        return self.head(x)  # (B, T, vocab)

    def loss(self, idx, targets):
        logits = self(idx).float()  # (B, T, vocab) the loss in fp32 also in mixed precision
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
