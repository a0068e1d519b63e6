"""Megatron tensor + sequence parallelism with uneven shards: each rank's heads, MLP columns and
sequence positions follow its sharding ratio (Zhang et al., "HAP", EuroSys 2024).

The block is chapter 03's (Shoeybi et al., "Megatron-LM", 2019, §3; Korthikanti et al., MLSys
2023, §4.2.2 for the sequence-parallel regions): the LayerNorms and residuals work on this rank's
t_r positions (B, t_r, C); an all-gather along the sequence feeds the column-parallel q, k, v (this
rank's h_r heads) and MLP input (its c_r columns); the row-parallel output projections' partial
sums are reduce-scattered back to (B, t_r, C). Only the sizes differ from chapter 03: h_r, c_r,
t_r come from `parlab.heterogeneous.tp_shares`, so the all-gathers and reduce-scatters are uneven
(`parlab.heterogeneous.uneven`: padded or exact).

The parallel model is cut from the reference model's weights by ranges, so it computes what the
single process does; the parameter names are the reference's, so chapter 03's
`assemble_state` glues the uneven shards back (it concatenates whatever sizes it is given).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.heterogeneous.tp_shares import bounds
from parlab.heterogeneous.uneven import GatherUneven, ReduceScatterUneven
from parlab.models.gpt import attention, maybe_checkpoint
from parlab.tensor_parallel.layers import shard_spec


def rows(weight: torch.Tensor, dim: int, start: int, end: int, groups: int = 1) -> torch.Tensor:
    """Units [start, end) of `weight` along `dim`, in each of `groups` stacked blocks."""
    blocks = weight.chunk(groups, dim=dim)  # groups × (…, size/groups, …)
    return torch.cat([b.narrow(dim, start, end - start) for b in blocks], dim=dim).clone()


class WeightShard(nn.Module):
    """This rank's slice of a bias-free linear's weight (out_r, in) or (out, in_r): x·Wᵀ."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight)

    def forward(self, x):
        return F.linear(x, self.weight)


class UnevenAttention(nn.Module):
    """Causal self-attention over this rank's h_r heads of every position: q, k, v column-parallel
    (3·h_r·hs output rows), attention local, output projection row-parallel (h_r·hs inputs)."""

    def __init__(self, attn, heads: tuple[int, int], comm, tokens: list[int], variant: str):
        super().__init__()
        hs = attn.head_dim
        lo, hi = heads[0] * hs, heads[1] * hs
        self.local_heads, self.head_dim = heads[1] - heads[0], hs
        self.c_attn = WeightShard(rows(attn.c_attn.weight.detach(), 0, lo, hi, 3))  # (3·h_r·hs, C)
        self.c_proj = WeightShard(rows(attn.c_proj.weight.detach(), 1, lo, hi))  # (C, h_r·hs)
        self.comm, self.tokens, self.variant = comm, tokens, variant

    def forward(self, x):
        full = GatherUneven.apply(x, self.comm, self.tokens, 1, self.variant)  # (B, T, C)
        qkv = self.c_attn(full)  # (B, T, 3·h_r·hs)
        B, T, width = qkv.shape
        q, k, v = qkv.split(width // 3, dim=2)  # 3 × (B, T, h_r·hs)
        q = q.view(B, T, self.local_heads, self.head_dim).transpose(1, 2)  # (B, h_r, T, hs)
        k = k.view(B, T, self.local_heads, self.head_dim).transpose(1, 2)  # (B, h_r, T, hs)
        v = v.view(B, T, self.local_heads, self.head_dim).transpose(1, 2)  # (B, h_r, T, hs)
        y = attention(q, k, v)  # (B, h_r, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, width // 3)  # (B, T, h_r·hs)
        partial = self.c_proj(y)  # (B, T, C) this rank's heads' part
        return ReduceScatterUneven.apply(partial, self.comm, self.tokens, 1, self.variant)  # (B, t_r, C)


class UnevenMLP(nn.Module):
    """GeLU(x·A)·B over this rank's c_r of the 4C hidden columns: A column-, B row-parallel."""

    def __init__(self, mlp, columns: tuple[int, int], comm, tokens: list[int], variant: str):
        super().__init__()
        lo, hi = columns
        self.c_fc = WeightShard(rows(mlp.c_fc.weight.detach(), 0, lo, hi))  # (c_r, C)
        self.c_proj = WeightShard(rows(mlp.c_proj.weight.detach(), 1, lo, hi))  # (C, c_r)
        self.comm, self.tokens, self.variant = comm, tokens, variant

    def forward(self, x):
        full = GatherUneven.apply(x, self.comm, self.tokens, 1, self.variant)  # (B, T, C)
        hidden = F.gelu(self.c_fc(full))  # (B, T, c_r)
        partial = self.c_proj(hidden)  # (B, T, C) this rank's columns' part
        return ReduceScatterUneven.apply(partial, self.comm, self.tokens, 1, self.variant)  # (B, t_r, C)


class UnevenBlock(nn.Module):
    """Pre-LayerNorm block on this rank's positions; LayerNorms replicated."""

    def __init__(self, block, split: dict, rank: int, comm, variant: str):
        super().__init__()
        self.ln_1, self.ln_2 = copy.deepcopy(block.ln_1), copy.deepcopy(block.ln_2)
        self.attn = UnevenAttention(block.attn, bounds(split["heads"])[rank], comm,
                                    split["tokens"], variant)
        self.mlp = UnevenMLP(block.mlp, bounds(split["columns"])[rank], comm, split["tokens"],
                             variant)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))  # (B, t_r, C)
        return x + self.mlp(self.ln_2(x))  # (B, t_r, C)


class UnevenTensorParallelGPT(nn.Module):
    """The tiny GPT on one rank of an uneven tensor + sequence parallel group: the blocks cut by
    `split` (heads, columns, tokens per rank), embeddings, LayerNorms and the tied head replicated.
    The rank embeds and scores only its t_r positions; its loss is the sum of their losses over
    all B·T tokens, so the ranks' losses add up to the mean, and the replicated parameters'
    gradients are summed over the group (`replicated_parameters`)."""

    def __init__(self, model, split: dict, comm, variant: str):
        super().__init__()
        self.config, self.split = model.config, split
        self.activation_checkpointing = getattr(model, "activation_checkpointing", False)
        self.positions = bounds(split["tokens"])[comm.rank]
        self.wte, self.wpe, self.ln_f = (copy.deepcopy(m) for m in (model.wte, model.wpe, model.ln_f))
        self.blocks = nn.ModuleList(UnevenBlock(b, split, comm.rank, comm, variant)
                                    for b in model.blocks)

    def replicated_parameters(self):
        return [p for n, p in self.named_parameters() if shard_spec(n) is None]

    def loss(self, idx, targets):
        B, T = idx.shape
        lo, hi = self.positions
        tokens = idx[:, lo:hi].clone()  # (B, t_r) a copy: backward keeps only these ids
        x = self.wte(tokens) + self.wpe(torch.arange(lo, hi))  # (B, t_r, C)
        for block in self.blocks:
            x = maybe_checkpoint(block, self.activation_checkpointing, x)  # (B, t_r, C)
        logits = self.ln_f(x) @ self.wte.weight.t()  # (B, t_r, vocab) tied head
        losses = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                 targets[:, lo:hi].reshape(-1).clone(), reduction="sum")
        return losses / (B * T)  # this rank's share of the mean over all B·T tokens
