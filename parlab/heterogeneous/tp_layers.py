"""Megatron tensor + sequence parallelism with uneven shards: each rank's heads, MLP columns and
sequence positions follow its sharding ratio (Zhang et al., "HAP", EuroSys 2024).

The block is chapter 03's (Shoeybi et al., "Megatron-LM", 2019, §3; Korthikanti et al., MLSys
2023, §4.2.2 for the sequence-parallel regions): the LayerNorms and residuals work on this rank's
t_r positions (B, t_r, C); an all-gather along the sequence feeds the column-parallel q, k, v (this
rank's h_r heads) and MLP input (its c_r columns); the row-parallel output projections' partial
sums are reduce-scattered back to (B, t_r, C). Only the sizes differ from chapter 03: h_r, c_r,
t_r come from `parlab.heterogeneous.tp_shares`, so the all-gathers and reduce-scatters are uneven
(`parlab.heterogeneous.uneven`: padded or exact).

These are the two linears only: chapter 03's `apply_tp(model, mesh, shares=split,
uneven=uneven_linears)` (`parlab.tensor_parallel.apply`) cuts the one GPT's attention and MLP by the
split and plugs them in; the parameter names stay the reference's, so chapter 03's `assemble_state`
glues the uneven shards back (it concatenates whatever sizes it is given).
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
