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
from parlab.models.gpt import Block, CausalSelfAttention, MLPBlock
from parlab.tensor_parallel.layers import shard_hidden, shard_loss, shard_spec


def rows(weight: torch.Tensor, dim: int, start: int, end: int, groups: int = 1) -> torch.Tensor:
    """Units [start, end) of `weight` along `dim`, in each of `groups` stacked blocks."""
    blocks = weight.chunk(groups, dim=dim)  # groups × (…, size/groups, …)
    return torch.cat([b.narrow(dim, start, end - start) for b in blocks], dim=dim).clone()


class GatheredShard(nn.Module):
    """Column-parallel slice (out_r, C) of a bias-free linear whose input is first all-gathered
    along the sequence: (B, t_r, C) -> (B, T, C) -> (B, T, out_r)."""

    def __init__(self, weight: torch.Tensor, comm, tokens: list[int], variant: str):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.comm, self.tokens, self.variant = comm, tokens, variant

    def forward(self, x):
        full = GatherUneven.apply(x, self.comm, self.tokens, 1, self.variant)  # (B, T, C)
        return F.linear(full, self.weight)  # (B, T, out_r)


class ScatteredShard(nn.Module):
    """Row-parallel slice (C, in_r) of a bias-free linear whose partial sums are reduce-scattered
    along the sequence: (B, T, in_r) -> (B, T, C) partial -> (B, t_r, C)."""

    def __init__(self, weight: torch.Tensor, comm, tokens: list[int], variant: str):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.comm, self.tokens, self.variant = comm, tokens, variant

    def forward(self, y):
        partial = F.linear(y, self.weight)  # (B, T, C) this rank's part of the sum
        return ReduceScatterUneven.apply(partial, self.comm, self.tokens, 1, self.variant)  # (B, t_r, C)


def uneven_attention(attn, heads: tuple[int, int], comm, tokens: list[int],
                     variant: str) -> CausalSelfAttention:
    """The GPT's attention over this rank's heads [h0, h1) of every position: q, k, v
    column-parallel (3·h_r·hs output rows), output projection row-parallel (h_r·hs inputs)."""
    hs = attn.head_dim
    lo, hi = heads[0] * hs, heads[1] * hs
    c_attn = GatheredShard(rows(attn.c_attn.weight.detach(), 0, lo, hi, 3), comm, tokens,
                           variant)  # (3·h_r·hs, C)
    c_proj = ScatteredShard(rows(attn.c_proj.weight.detach(), 1, lo, hi), comm, tokens,
                            variant)  # (C, h_r·hs)
    return CausalSelfAttention(c_attn, c_proj, heads[1] - heads[0], hs)


def uneven_mlp(mlp, columns: tuple[int, int], comm, tokens: list[int], variant: str) -> MLPBlock:
    """The GPT's MLP over this rank's c_r of the 4C hidden columns: A column-, B row-parallel."""
    lo, hi = columns
    return MLPBlock(GatheredShard(rows(mlp.c_fc.weight.detach(), 0, lo, hi), comm, tokens,
                                  variant),  # (c_r, C)
                    ScatteredShard(rows(mlp.c_proj.weight.detach(), 1, lo, hi), comm, tokens,
                                   variant))  # (C, c_r)


def uneven_block(block, split: dict, rank: int, comm, variant: str) -> Block:
    """The GPT's pre-LayerNorm block on this rank's positions; LayerNorms replicated."""
    tokens = split["tokens"]
    return Block(copy.deepcopy(block.ln_1),
                 uneven_attention(block.attn, bounds(split["heads"])[rank], comm, tokens, variant),
                 copy.deepcopy(block.ln_2),
                 uneven_mlp(block.mlp, bounds(split["columns"])[rank], comm, tokens, variant))


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
        self.blocks = nn.ModuleList(uneven_block(b, split, comm.rank, comm, variant)
                                    for b in model.blocks)

    def replicated_parameters(self):
        return [p for n, p in self.named_parameters() if shard_spec(n) is None]

    def loss(self, idx, targets):
        mine = slice(*self.positions)  # (t_r positions)
        x = shard_hidden(self, idx, mine)  # (B, t_r, C)
        return shard_loss(self, x, targets, mine, fp32_logits=False)  # this rank's share of the mean
