"""Megatron tensor + sequence parallelism with uneven shards: each rank's heads, MLP columns and
sequence positions follow its sharding ratio (Zhang et al., "HAP", EuroSys 2024).

The block is chapter 03's (Shoeybi et al., "Megatron-LM", 2019, §3; Korthikanti et al., MLSys
2023, §4.2.2); only the sizes h_r, c_r, t_r differ (`parlab.heterogeneous.tp_shares`), so the
all-gathers and reduce-scatters are uneven (`parlab.heterogeneous.uneven`: padded or exact).
These are the two linears only: chapter 03's `apply_tp(model, mesh, shares=split,
uneven=uneven_linears)` cuts the one GPT by the split, and its `assemble_state` glues the uneven
shards back. In full: docs/heterogeneous.md, `parlab.heterogeneous.tp_layers`.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.heterogeneous.uneven import GatherUneven, ReduceScatterUneven


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
        summand = F.linear(y, self.weight)  # (B, T, C) this rank's part of the sum
        return ReduceScatterUneven.apply(summand, self.comm, self.tokens, 1, self.variant)  # (B, t_r, C)


def uneven_linears(comm, tokens: list[int], variant: str):
    """(column, row): weight slice -> the uneven sequence-parallel linears over `comm`, every
    rank's positions `tokens`, the uneven collectives `variant` (padded or exact)."""
    return (partial(GatheredShard, comm=comm, tokens=tokens, variant=variant),
            partial(ScatteredShard, comm=comm, tokens=tokens, variant=variant))
