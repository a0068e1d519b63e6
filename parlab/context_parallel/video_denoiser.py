"""A tiny video denoiser: a transformer over the patches of a T×H×W latent, and its sampler.

The setting of Wu et al., "Communication-Efficient Serving for Video Diffusion Models with Latent
Parallelism" (2025, arXiv 2512.07350): a diffusion transformer (Peebles & Xie, ICCV 2023)
denoising a video latent with full 3D attention over T·H·W patch tokens. Untrained but
deterministic from a seed (the question is whether a parallel run computes the same function);
locality from an ALiBi-style bias (Press et al., "Train Short, Test Long", ICLR 2022) in 3D: head
i subtracts slope_i · (|Δt| + |Δh| + |Δw|), which makes latent parallelism's halo meaningful.
Sampling: Euler steps of the velocity from noise level 1 to 0 over `denoise_steps` (rectified
flow: Liu et al., ICLR 2023). Tokens in (t, h, w) order: id = (t·H + h)·W + w. In full:
docs/context_parallel.md, `parlab.context_parallel.video_denoiser`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.context_parallel.ring_attention import block_attention
from parlab.models.gpt import multi_head, split_qkv


@dataclass(frozen=True)
class VideoConfig:
    frames: int = 4  # T
    height: int = 8  # H (patches)
    width: int = 8  # W (patches)
    channels: int = 4  # latent channels per patch
    n_embd: int = 32
    n_head: int = 4
    n_layer: int = 2
    batch: int = 1
    denoise_steps: int = 6
    locality: float = 1.0  # slope of the distance bias of the steepest head

    @property
    def tokens(self) -> int:
        return self.frames * self.height * self.width

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        return (self.batch, self.frames, self.height, self.width, self.channels)

    def validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "locality":
                if not isinstance(value, (int, float)) or value < 0:
                    raise ValueError(f"VideoConfig.locality={value!r} must be a number >= 0")
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"VideoConfig.{f.name}={value!r} must be an int >= 1")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")


def coordinates(cfg: VideoConfig, ids: torch.Tensor) -> torch.Tensor:
    """(t, h, w) of flat token ids: (N,) -> (N, 3)."""
    t, rest = ids // (cfg.height * cfg.width), ids % (cfg.height * cfg.width)
    return torch.stack([t, rest // cfg.width, rest % cfg.width], dim=1)  # (N, 3)


def box_ids(cfg: VideoConfig, t: tuple, h: tuple, w: tuple) -> torch.Tensor:
    """Flat ids of the patches in the box [t0, t1) × [h0, h1) × [w0, w1), in (t, h, w) order."""
    tt, hh, ww = torch.meshgrid(torch.arange(*t), torch.arange(*h), torch.arange(*w),
                                indexing="ij")
    return ((tt * cfg.height + hh) * cfg.width + ww).reshape(-1)  # (|box|,)


class VideoBlock(nn.Module):
    def __init__(self, cfg: VideoConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.fc_out = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x, attention):
        q, k, v = split_qkv(self.qkv(self.ln_1(x)))  # 3 × (B, N, D)
        y = multi_head(q, k, v, self.head_dim, attention)  # (B, N, D)
        x = x + self.proj(y)
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))  # (B, N, D)


class TinyVideoDenoiser(nn.Module):
    """velocity = model(x tokens (B, N, C), token ids (N,), noise level σ, attention)."""

    def __init__(self, cfg: VideoConfig, seed: int = 0):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        D = cfg.n_embd
        self.inp = nn.Linear(cfg.channels, D, bias=False)
        self.pos_t = nn.Parameter(torch.zeros(cfg.frames, D))
        self.pos_h = nn.Parameter(torch.zeros(cfg.height, D))
        self.pos_w = nn.Parameter(torch.zeros(cfg.width, D))
        self.time = nn.Linear(D, D, bias=False)
        self.blocks = nn.ModuleList(VideoBlock(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(D)
        self.out = nn.Linear(D, cfg.channels, bias=False)
        slopes = [cfg.locality * 2.0 ** (-i) for i in range(cfg.n_head)]  # ALiBi's geometric slopes
        self.register_buffer("slopes", torch.tensor(slopes))
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, 1.0 / math.sqrt(p.size(-1)), generator=g)

    def bias(self, q_ids, k_ids, heads=None):
        """Score bias −slope_head · L1 distance in patches: (nh or len(heads), Tq, Tk)."""
        dist = (coordinates(self.cfg, q_ids)[:, None, :]
                - coordinates(self.cfg, k_ids)[None, :, :]).abs().sum(-1)  # (Tq, Tk)
        slopes = self.slopes if heads is None else self.slopes[heads]  # (h,)
        return -slopes[:, None, None] * dist.float()  # (h, Tq, Tk)

    def time_embedding(self, sigma: float):
        half = self.cfg.n_embd // 2
        freqs = torch.exp(-math.log(1000.0) * torch.arange(half) / half)  # (D/2,)
        angles = sigma * 1000.0 * freqs
        return self.time(torch.cat([angles.sin(), angles.cos()]))  # (D,)

    def forward(self, x, ids, sigma: float, attention):
        where = coordinates(self.cfg, ids)  # (N, 3)
        h = self.inp(x) + self.pos_t[where[:, 0]] + self.pos_h[where[:, 1]] \
            + self.pos_w[where[:, 2]] + self.time_embedding(sigma)  # (B, N, D)
        for block in self.blocks:
            h = block(h, attention)
        return self.out(self.ln_f(h))  # (B, N, C)

    def local_attention(self, ids):
        """attention(q, k, v) among the tokens `ids` only (one process, no communication)."""
        bias = self.bias(ids, ids)  # (nh, N, N)
        return lambda q, k, v: block_attention(q, k, v, None, bias)[0]


def noise_levels(cfg: VideoConfig) -> list[float]:
    return [1.0 - i / cfg.denoise_steps for i in range(cfg.denoise_steps + 1)]


def initial_noise(cfg: VideoConfig, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 12345)
    return torch.randn(cfg.shape, generator=g)  # (B, T, H, W, C)


@torch.no_grad()
def sample(cfg: VideoConfig, seed: int = 0) -> torch.Tensor:
    """The single-process reference: every step attends over all T·H·W patches."""
    model = TinyVideoDenoiser(cfg, seed)
    x = initial_noise(cfg, seed)  # (B, T, H, W, C)
    ids = torch.arange(cfg.tokens)
    attention = model.local_attention(ids)
    sigmas = noise_levels(cfg)
    for s in range(cfg.denoise_steps):
        v = model(x.reshape(cfg.batch, -1, cfg.channels), ids, sigmas[s], attention)  # (B, N, C)
        x = x + (sigmas[s + 1] - sigmas[s]) * v.reshape(cfg.shape)  # (B, T, H, W, C)
    return x
