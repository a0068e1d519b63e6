"""The parts a Llama-style GPT swaps into the one GPT (`parlab.models.gpt`), each a config option
that defaults off, so the tiny GPT stays exactly nanoGPT's: grouped-query attention (Ainslie et
al., "GQA", 2023; `n_kv_head`), rotary position embeddings (Su et al., "RoFormer", 2021;
`positions="rope"`, `rope_theta`), RMSNorm (Zhang & Sennrich, 2019) and the SwiGLU MLP (Shazeer,
"GLU Variants Improve Transformer", 2020; (SiLU(x·W) ⊙ x·V)·W₂, width `d_ff`). Llama 3 (Meta,
"The Llama 3 Herd of Models", 2024) is all four with an untied head (`tie_head=False`;
`parlab.models.presets`). Written in plain operators (no fused kernel), so the paced clock counts
the same operators on real and fake tensors. Each part in a line: docs/models.md,
`parlab.models.llama_parts`.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · g (Zhang & Sennrich 2019): LayerNorm's rescaling without
    re-centring and without a bias; one gain `weight` per channel, initialised to ones."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # (B, T, 1)
        return x * rms * self.weight  # (B, T, C)


class SwiGLU(nn.Module):
    """(SiLU(x·W) ⊙ x·V)·W₂ (Shazeer 2020): `c_fc` is the gate W, `c_up` the value V (both
    C → d_ff), `c_proj` W₂ (d_ff → C). Named like the GELU MLP's parts where they play its role."""

    def __init__(self, c_fc: nn.Module, c_up: nn.Module, c_proj: nn.Module):
        super().__init__()
        self.c_fc, self.c_up, self.c_proj = c_fc, c_up, c_proj

    @classmethod
    def for_config(cls, cfg) -> SwiGLU:
        C, F_ = cfg.n_embd, cfg.hidden_width
        return cls(nn.Linear(C, F_, bias=False), nn.Linear(C, F_, bias=False),
                   nn.Linear(F_, C, bias=False))

    def forward(self, x):
        return self.c_proj(F.silu(self.c_fc(x)) * self.c_up(x))  # (B, T, d_ff) -> (B, T, C)


def rope(x, theta: float):
    """Rotate x (B, nh, T, hs) by its positions 0..T-1 (Su et al. 2021), in the half-split layout
    of Llama's released code: channel i pairs with channel i + hs/2, turned by the angle
    position · theta^(-2i/hs). Computed from T here (no buffer), so it costs operators, not state."""
    T, hs = x.size(-2), x.size(-1)
    inv_freq = theta ** (-torch.arange(0, hs, 2, dtype=torch.float32) / hs)  # (hs/2,)
    angles = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]  # (T, hs/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, hs)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, hs) each
    x1, x2 = x[..., : hs // 2], x[..., hs // 2:]  # 2 × (B, nh, T, hs/2)
    rotated = torch.cat([-x2, x1], dim=-1)  # (B, nh, T, hs)
    return x * cos + rotated * sin  # (B, nh, T, hs)


def grouped_heads(qkv, n_head: int, n_kv_head: int, head_dim: int, rope_theta, attend,
                  multi_head):
    """[q; k; v] (B, T, (nh + 2·n_kv)·hs) -> `attend` per query head -> (B, T, nh·hs).

    Grouped-query attention (Ainslie et al. 2023): query head h reads key/value head
    h // (nh / n_kv); each k, v head is repeated in place to nh heads, so the head split and the
    attention itself (and its backward, which sums the repeats' gradients) are the GPT's own
    (`multi_head`: `parlab.models.gpt.multi_head`, passed in by the GPT, whose module this one
    must not import). `rope_theta` (None: no rotation) rotates q and k by their positions inside
    the heads, before the scores."""
    B, T, _ = qkv.shape
    q, k, v = qkv.split([n_head * head_dim, n_kv_head * head_dim, n_kv_head * head_dim],
                        dim=-1)  # (B, T, nh·hs), 2 × (B, T, n_kv·hs)
    group = n_head // n_kv_head
    if group > 1:
        k, v = (t.unflatten(-1, (n_kv_head, 1, head_dim))  # (B, T, n_kv, 1, hs)
                .expand(B, T, n_kv_head, group, head_dim)  # (B, T, n_kv, group, hs)
                .reshape(B, T, n_head * head_dim) for t in (k, v))  # (B, T, nh·hs)
    inner = attend
    if rope_theta is not None:
        def attend(q, k, v):  # (B, nh, T, hs) each
            return inner(rope(q, rope_theta), rope(k, rope_theta), v)
    else:
        attend = inner
    return multi_head(q, k, v, head_dim, attend)  # (B, T, nh·hs)


def validate_options(cfg) -> None:
    """ValueError naming the first bad Llama-style option of the GPT's config `cfg`."""
    for name in ("n_kv_head", "d_ff"):
        value = getattr(cfg, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"GPTConfig.{name}={value!r} must be None or an int >= 1")
    if cfg.n_head % cfg.kv_heads:
        raise ValueError(f"n_head={cfg.n_head} is not divisible by n_kv_head={cfg.n_kv_head}: each "
                         "key/value head serves a whole group of query heads")
    for name, choices in (("mlp", ("gelu", "swiglu")), ("norm", ("layernorm", "rmsnorm")),
                          ("positions", ("learned", "rope"))):
        if getattr(cfg, name) not in choices:
            raise ValueError(f"GPTConfig.{name}={getattr(cfg, name)!r} must be one of {choices}")
    for name in ("norm_eps", "rope_theta"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"GPTConfig.{name}={value!r} must be a finite number > 0")
    if cfg.positions == "rope" and cfg.head_dim % 2:
        raise ValueError(f"positions='rope' rotates pairs of channels: head_dim={cfg.head_dim} "
                         "must be even")
    if not isinstance(cfg.tie_head, bool):
        raise ValueError(f"GPTConfig.tie_head={cfg.tie_head!r} must be True or False")


def tp_factors(cfg) -> list[tuple[str, int]]:
    """What a tensor-parallel degree must divide besides nanoGPT's heads and widths: the key/value
    heads (a rank holds whole groups of query heads with the key/value head they share) and
    SwiGLU's d_ff (its columns); empty for the default GPT."""
    out = []
    if getattr(cfg, "n_kv_head", None) is not None:
        out.append(("n_kv_head", cfg.n_kv_head))
    if getattr(cfg, "d_ff", None) is not None:
        out.append(("MLP width d_ff", cfg.d_ff))
    return out
