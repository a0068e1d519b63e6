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
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as _checkpoint

from parlab.models.base import ConfiguredModel
from parlab.models.checks import require_positive_ints
from parlab.models.data import VOCAB, text_batch, text_max_seq_len
from parlab.models.spec import ModelSpec, register_model


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
        require_positive_ints(self)
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
    """Causal self-attention: c_attn projects x to [q; k; v] of this module's heads, `attend` runs
    attention per head, c_proj projects the heads back. This is the one attention of the package:
    every parallel attention is this class with other parts plugged in — tensor parallelism's
    column- and row-parallel linears (`parlab.tensor_parallel.layers`), uneven shards
    (`parlab.heterogeneous.tp_layers`), ring attention as `attend` under context parallelism
    (`parlab.context_parallel`), so the head split below is written once."""

    attend = None  # plain causal `attention`; context parallelism sets ring attention per instance

    def __init__(self, c_attn: nn.Module, c_proj: nn.Module, n_head: int, head_dim: int):
        super().__init__()
        self.c_attn, self.c_proj = c_attn, c_proj
        self.n_head, self.head_dim = n_head, head_dim  # the heads this module computes

    @classmethod
    def for_config(cls, cfg: GPTConfig) -> CausalSelfAttention:
        return cls(nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False),
                   nn.Linear(cfg.n_embd, cfg.n_embd, bias=False), cfg.n_head, cfg.head_dim)

    def forward(self, x):
        q, k, v = split_qkv(self.c_attn(x))  # 3 × (B, T, nh·hs)
        return self.c_proj(multi_head(q, k, v, self.head_dim, self.attend))  # (B, T, C)


def split_qkv(qkv):
    """[q; k; v] stacked on the last dimension (B, T, 3·W) -> q, k, v, each (B, T, W)."""
    return qkv.split(qkv.size(-1) // 3, dim=-1)  # 3 × (B, T, W)


def multi_head(q, k, v, head_dim: int, attend=None):
    """q, k, v (B, T, nh·hs) -> `attend` (default: causal `attention`) on each of the nh heads ->
    (B, T, nh·hs). The number of heads is read from the width, so a rank holding a share of the
    heads (tensor parallelism, even or uneven) runs the same code."""
    B, T, width = q.shape
    heads = width // head_dim
    q = q.view(B, T, heads, head_dim).transpose(1, 2)  # (B, nh, T, hs)
    k = k.view(B, k.size(1), heads, head_dim).transpose(1, 2)  # (B, nh, Tk, hs)
    v = v.view(B, v.size(1), heads, head_dim).transpose(1, 2)  # (B, nh, Tk, hs)
    y = (attend or attention)(q, k, v)  # (B, nh, T, hs)
    return y.transpose(1, 2).contiguous().view(B, T, width)  # (B, T, nh·hs)


def attention(q, k, v, causal: bool = True):
    """Softmax(q·kᵀ/√d)·v with a causal mask; q (B, nh, Tq, hs), k, v (B, nh, Tk, hs)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, nh, Tq, Tk)
    if causal:
        Tq, Tk = q.size(-2), k.size(-2)
        mask = torch.ones(Tq, Tk, dtype=torch.bool).tril(diagonal=Tk - Tq)  # (Tq, Tk)
        scores = scores.masked_fill(~mask, float("-inf"))
    return F.softmax(scores, dim=-1) @ v  # (B, nh, Tq, hs)


class MLPBlock(nn.Module):
    """GeLU(x·A)·B: c_fc widens to the hidden width, c_proj projects back; like the attention,
    the one MLP of the package, whose parts tensor parallelism replaces by sharded linears."""

    def __init__(self, c_fc: nn.Module, c_proj: nn.Module):
        super().__init__()
        self.c_fc, self.c_proj = c_fc, c_proj

    @classmethod
    def for_config(cls, cfg: GPTConfig) -> MLPBlock:
        return cls(nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False),
                   nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False))

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm block: x + attn(ln_1(x)), then + mlp(ln_2(x)); the parallel blocks are this
    one with parallel parts."""

    def __init__(self, ln_1: nn.Module, attn: nn.Module, ln_2: nn.Module, mlp: nn.Module):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = ln_1, attn, ln_2, mlp

    @classmethod
    def for_config(cls, cfg: GPTConfig) -> Block:
        return cls(nn.LayerNorm(cfg.n_embd), CausalSelfAttention.for_config(cfg),
                   nn.LayerNorm(cfg.n_embd), MLPBlock.for_config(cfg))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        return x + self.mlp(self.ln_2(x))  # (B, T, C)


class GPT(ConfiguredModel):
    """Token and position embeddings, `n_layer` pre-norm blocks, a final LayerNorm and the head
    tied to the token embedding (nanoGPT's model); `loss`: next-token cross-entropy."""

    def __init__(self, cfg: GPTConfig, seed: int = 0):
        super().__init__(cfg)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(self.make_block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.wte.weight.normal_(0.0, 0.02, generator=g)
            self.wpe.weight.normal_(0.0, 0.02, generator=g)
        proj_std = 0.02 / math.sqrt(2 * cfg.n_layer)  # GPT-2's scaled residual init
        for block in self.blocks:
            _init_linear(block.attn.c_attn, g)
            _init_linear(block.attn.c_proj, g, proj_std)
            self.init_mlp(block.mlp, g, proj_std)

    def make_block(self, cfg: GPTConfig, index: int) -> Block:
        """Block `index` (a variant such as `parlab.models.gpt_moe` swaps its MLP here)."""
        return Block.for_config(cfg)

    def init_mlp(self, mlp: nn.Module, g: torch.Generator, proj_std: float) -> None:
        """Draw a block's MLP weights from `g`, after its attention's, in a fixed order."""
        _init_linear(mlp.c_fc, g)
        _init_linear(mlp.c_proj, g, proj_std)

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


# ----------------------------------------------------------------------------- counts, registration
def trunk_param_count(cfg: GPTConfig) -> int:
    """Parameters outside the blocks' MLPs: wte (tied head), wpe, ln_f, and per block two
    LayerNorms and attention's c_attn and c_proj."""
    C = cfg.n_embd
    return cfg.vocab_size * C + cfg.block_size * C + 2 * C + cfg.n_layer * (4 * C + 4 * C * C)


def param_count(cfg: GPTConfig) -> int:
    """Parameters of the GPT, from the config alone: the trunk and each block's 4× MLP."""
    return trunk_param_count(cfg) + cfg.n_layer * 8 * cfg.n_embd ** 2


def activation_count(cfg: GPTConfig, batch_size: int) -> int:
    """A generous count of the elements a forward over `batch_size` rows saves: every block's
    intermediates, attention scores, softmax and mask, the embeddings and the logits."""
    B, C, T = batch_size, cfg.n_embd, cfg.block_size
    tokens = B * T
    per_block = 20 * tokens * C + 3 * B * cfg.n_head * T * T + T * T  # + scores, softmax, mask
    return 2 * tokens * C + 3 * tokens * cfg.vocab_size + cfg.n_layer * per_block


register_model(ModelSpec("gpt", GPTConfig, GPT, param_count, activation_count, text_batch,
                         text_max_seq_len))
