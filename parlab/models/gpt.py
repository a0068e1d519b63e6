"""The tiny GPT (nanoGPT-shaped) every scheme trains, deterministic from a seed.

The GPT follows Karpathy's nanoGPT `model.py` (itself GPT-2, Radford et al. 2019): token and
position embeddings, pre-LayerNorm blocks of causal self-attention and a 4× MLP with GELU, a
final LayerNorm and a head tied to the token embedding. Linear layers have no bias (nanoGPT's
`bias=False`): the key bias of attention has an exactly-zero gradient (softmax ignores a
constant shift), and Adam would turn the float noise in it into full-size updates. No dropout,
so that every parallel scheme can be compared with the single process exactly. Attention is written out (q·kᵀ,
mask, softmax, ·v) rather than calling a fused kernel, so tensor, sequence and context
parallelism can split it and the score matrix shows in the memory ledger.

Llama-style options (`parlab.models.llama_parts`: grouped-query attention, SwiGLU, RMSNorm, RoPE,
an untied head) all default off; with the defaults the modules, parameters, draws and operators
are nanoGPT's, exactly.

Parameters are created in a fixed order from `torch.Generator().manual_seed(seed)`, so every
rank of every scheme starts from the same weights as the reference.

The embedding, the blocks' loop, the tied head and the loss are `parlab.models.gpt_trunk`'s, which
HAP's and torch-TP's GPTs call too; the chapters' `apply_*` parallelise this GPT itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.models.base import ConfiguredModel
from parlab.models.data import VOCAB, text_batch, text_max_seq_len
from parlab.models.gpt_trunk import (
    embed_tokens,
    head_logits,
    maybe_checkpoint,
    mean_token_loss,
    run_blocks,
)
from parlab.models.llama_parts import RMSNorm, SwiGLU, grouped_heads, validate_options
from parlab.models.spec import ModelSpec, register_model


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 96  # printable ASCII + newline (parlab.models.data)
    block_size: int = 32  # sequence length T
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 32
    # Llama-style options (`parlab.models.llama_parts`), each off by default: nanoGPT's GPT
    n_kv_head: int | None = None  # grouped-query attention's k/v heads; None: n_head (multi-head)
    mlp: str = "gelu"  # "gelu": 4× GELU MLP; "swiglu": SwiGLU of width d_ff
    d_ff: int | None = None  # the MLP's hidden width; None: 4·n_embd
    norm: str = "layernorm"  # "layernorm" or "rmsnorm" (eps `norm_eps`)
    norm_eps: float = 1e-5
    positions: str = "learned"  # "learned": a position table wpe; "rope": rotary, base rope_theta
    rope_theta: float = 10000.0
    tie_head: bool = True  # False: an own output head lm_head (C -> vocab)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def hidden_width(self) -> int:
        return 4 * self.n_embd if self.d_ff is None else self.d_ff

    @property
    def is_default_shape(self) -> bool:
        """Whether every Llama-style option is off (nanoGPT's GPT)."""
        return (self.n_kv_head is None and self.mlp == "gelu" and self.d_ff is None
                and self.norm == "layernorm" and self.positions == "learned" and self.tie_head)

    def validate(self) -> None:
        for name in _INT_FIELDS:  # the Llama-style options are checked below (None, str, float)
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{type(self).__name__}.{name}={value!r} must be an int >= 1")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        validate_options(self)
        if self.vocab_size < len(VOCAB):  # a token id >= vocab_size would index past the embedding
            raise ValueError(f"GPTConfig.vocab_size={self.vocab_size} is below the {len(VOCAB)} "
                             "symbols of the text dataset")


_INT_FIELDS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")


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

    def __init__(self, c_attn: nn.Module, c_proj: nn.Module, n_head: int, head_dim: int,
                 n_kv_head: int | None = None, rope_theta: float | None = None):
        super().__init__()
        self.c_attn, self.c_proj = c_attn, c_proj
        self.n_head, self.head_dim = n_head, head_dim  # the heads this module computes
        # grouped-query attention's k/v heads (None: n_head) and RoPE's base (None: no rotation)
        self.n_kv_head, self.rope_theta = n_kv_head, rope_theta

    @classmethod
    def for_config(cls, cfg: GPTConfig) -> CausalSelfAttention:
        if cfg.n_kv_head is None and cfg.positions == "learned":  # nanoGPT's attention
            return cls(nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False),
                       nn.Linear(cfg.n_embd, cfg.n_embd, bias=False), cfg.n_head, cfg.head_dim)
        width = (cfg.n_head + 2 * cfg.kv_heads) * cfg.head_dim  # [q; k; v], k and v of n_kv heads
        return cls(nn.Linear(cfg.n_embd, width, bias=False),
                   nn.Linear(cfg.n_embd, cfg.n_embd, bias=False), cfg.n_head, cfg.head_dim,
                   cfg.kv_heads, cfg.rope_theta if cfg.positions == "rope" else None)

    def forward(self, x):
        if self.n_kv_head is not None or self.rope_theta is not None:  # GQA and / or RoPE
            return self.c_proj(grouped_heads(self.c_attn(x), self.n_head, self.n_kv_head or self.n_head,
                                             self.head_dim, self.rope_theta,
                                             self.attend or attention, multi_head))  # (B, T, C)
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
    def for_config(cls, cfg: GPTConfig) -> nn.Module:
        if cfg.mlp == "swiglu":
            return SwiGLU.for_config(cfg)
        return cls(nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False),
                   nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False))

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # (B, T, C)


def make_norm(cfg: GPTConfig) -> nn.Module:
    """The config's normalisation over n_embd channels: LayerNorm (nanoGPT's) or RMSNorm."""
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.n_embd, cfg.norm_eps)
    return nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)


class Block(nn.Module):
    """Pre-LayerNorm block: x + attn(ln_1(x)), then + mlp(ln_2(x)); the parallel blocks are this
    one with parallel parts. `checkpoint`: recomputed in backward from inside its own call (what
    `gpt_on_mesh` sets, so a pipeline stage calling the block directly recomputes it too)."""

    checkpoint = False

    def __init__(self, ln_1: nn.Module, attn: nn.Module, ln_2: nn.Module, mlp: nn.Module):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = ln_1, attn, ln_2, mlp

    @classmethod
    def for_config(cls, cfg: GPTConfig) -> Block:
        return cls(make_norm(cfg), CausalSelfAttention.for_config(cfg), make_norm(cfg),
                   MLPBlock.for_config(cfg))

    def forward(self, x):
        return maybe_checkpoint(self.residuals, self.checkpoint, x)  # (B, T, C)

    def residuals(self, x):
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        return x + self.mlp(self.ln_2(x))  # (B, T, C)


class GPT(ConfiguredModel):
    """Token and position embeddings, `n_layer` pre-norm blocks, a final LayerNorm and the head
    tied to the token embedding (nanoGPT's model); `loss`: next-token cross-entropy. The
    Llama-style options drop the position table (`positions="rope"`: no `wpe`) and add an own
    head after `ln_f` (`tie_head=False`: `lm_head`, drawn last so the rest draws as before).

    Open to every parallel dimension (each chapter's `apply_*` takes and returns it, after
    `gpt_on_mesh`): `positions` are the sequence positions of the tokens this rank holds (None:
    all; `apply_cp`, sequence parallelism), `criterion(model, hidden, targets)` replaces the head
    and the cross-entropy (`apply_tp`'s vocabulary parallelism), `embed` / `head` are what
    pipeline stages call (`split_pp` sets `pipeline`), `data_comm` is the dp × cp group."""

    positions = None
    criterion = None
    pipeline = None
    data_comm = None

    def __init__(self, cfg: GPTConfig, seed: int = 0):
        super().__init__(cfg)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        if cfg.positions == "learned":
            self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(self.make_block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = make_norm(cfg)
        if not cfg.tie_head:
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.wte.weight.normal_(0.0, 0.02, generator=g)
            if cfg.positions == "learned":
                self.wpe.weight.normal_(0.0, 0.02, generator=g)
        proj_std = 0.02 / math.sqrt(2 * cfg.n_layer)  # GPT-2's scaled residual init
        for block in self.blocks:
            _init_linear(block.attn.c_attn, g)
            _init_linear(block.attn.c_proj, g, proj_std)
            self.init_mlp(block.mlp, g, proj_std)
        if not cfg.tie_head:
            _init_linear(self.lm_head, g)

    def make_block(self, cfg: GPTConfig, index: int) -> Block:
        """Block `index` (a variant such as `parlab.models.gpt_moe` swaps its MLP here)."""
        return Block.for_config(cfg)

    def init_mlp(self, mlp: nn.Module, g: torch.Generator, proj_std: float) -> None:
        """Draw a block's MLP weights from `g`, after its attention's, in a fixed order."""
        _init_linear(mlp.c_fc, g)
        if isinstance(mlp, SwiGLU):
            _init_linear(mlp.c_up, g)
        _init_linear(mlp.c_proj, g, proj_std)

    def embed(self, idx):
        return embed_tokens(self, idx, self.positions)  # (B, T_r, C) at the tokens' positions

    def head(self, x):
        return head_logits(self, x)  # (B, T_r, vocab)

    def forward(self, idx):
        x = run_blocks(self.blocks, self.embed(idx), self.activation_checkpointing)  # (B, T_r, C)
        if self.criterion is not None:
            return x  # (B, T_r, C): the criterion's head takes it
        return self.head(x)  # (B, T_r, vocab)

    def loss(self, idx, targets):
        """Mean cross-entropy of this rank's tokens, in fp32 also in mixed precision (or the
        `criterion`'s); through `self(idx)`, so hooks on the model (ZeRO-3's gathers) run."""
        out = self(idx)  # (B, T_r, vocab), or (B, T_r, C) for the criterion
        if self.criterion is not None:
            return self.criterion(self, out, targets)
        return mean_token_loss(out, targets)


def gpt_on_mesh(model: GPT) -> GPT:
    """`model` (no copy) ready for the chapters' `apply_*`: every position its own (until
    `apply_cp` or sequence parallelism cut them) and its checkpointing moved inside each block,
    so a pipeline stage recomputes the blocks it calls, and ZeRO-3's hooks run once per call
    (`parlab.planner.compose` says why every composed plan is then exact)."""
    model.positions = torch.arange(model.config.block_size)  # (T,)
    for block in model.blocks:
        block.checkpoint = model.activation_checkpointing
    model.activation_checkpointing = False  # the blocks recompute themselves
    return model


# ----------------------------------------------------------------------------- counts, registration
def trunk_param_count(cfg: GPTConfig) -> int:
    """Parameters outside the blocks' MLPs: wte (tied head, or + lm_head), wpe (learned
    positions), ln_f, and per block two norms and attention's c_attn and c_proj."""
    C = cfg.n_embd
    norm = C if cfg.norm == "rmsnorm" else 2 * C  # gain (and LayerNorm's bias)
    embeddings = cfg.vocab_size * C * (1 if cfg.tie_head else 2)
    embeddings += cfg.block_size * C if cfg.positions == "learned" else 0
    attn = C * (cfg.n_head + 2 * cfg.kv_heads) * cfg.head_dim + C * C  # c_attn, c_proj
    return embeddings + norm + cfg.n_layer * (2 * norm + attn)


def param_count(cfg: GPTConfig) -> int:
    """Parameters of the GPT, from the config alone: the trunk and each block's MLP (GELU: two
    C × d_ff matrices; SwiGLU: three)."""
    per_mlp = (3 if cfg.mlp == "swiglu" else 2) * cfg.n_embd * cfg.hidden_width
    return trunk_param_count(cfg) + cfg.n_layer * per_mlp


def activation_count(cfg: GPTConfig, batch_size: int) -> int:
    """A generous count of the elements a forward over `batch_size` rows saves: every block's
    intermediates, attention scores, softmax and mask, the embeddings and the logits."""
    B, C, T = batch_size, cfg.n_embd, cfg.block_size
    tokens = B * T
    per_block = 20 * tokens * C + 3 * B * cfg.n_head * T * T + T * T  # + scores, softmax, mask
    return 2 * tokens * C + 3 * tokens * cfg.vocab_size + cfg.n_layer * per_block


register_model(ModelSpec("gpt", GPTConfig, GPT, param_count, activation_count, text_batch,
                         text_max_seq_len))
