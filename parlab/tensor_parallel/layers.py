"""Megatron tensor parallelism for the tiny GPT: column- and row-parallel linears, split heads.

Shoeybi et al., "Megatron-LM" (2019), §3: the MLP's first matmul split by *columns* (GeLU needs
no communication), the second by *rows* (partial sums, all-reduced once: g); attention split by
heads (q, k, v column-parallel, the output projection row-parallel). Per block: 2 all-reduces of
(B, T, C) forward and 2 backward. Korthikanti et al. (MLSys 2023) add sequence parallelism
(`parlab.tensor_parallel.ops`). The parts are cut from *the reference model's weights* (`rows`:
even or uneven), so they compute exactly what the single process does; `apply_tp` plugs them
into the one GPT, `SHARDING` says how every parameter is cut and `assemble_state` glues the
shards back. In full: docs/tensor_parallel.md, `parlab.tensor_parallel.layers`.
"""

from __future__ import annotations

import copy
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.models.gpt import Block, CausalSelfAttention, MLPBlock
from parlab.models.llama_parts import SwiGLU
from parlab.tensor_parallel.async_ops import RingGatherMatmul
from parlab.tensor_parallel.ops import (
    CopyToTensorParallel,
    GatheredColumnMatmul,
    GatherFromSequenceParallel,
    ReduceFromTensorParallel,
    ReduceScatterToSequenceParallel,
)

# parameter-name suffix -> (dimension cut, number of stacked groups cut separately)
SHARDING = {
    "attn.c_attn.weight": (0, 3),  # (3C, C): rows [q; k; v], each cut by heads
    "attn.c_proj.weight": (1, 1),  # (C, C): input columns cut by heads
    "mlp.c_fc.weight": (0, 1),  # (4C, C): output rows cut
    "mlp.c_proj.weight": (1, 1),  # (C, 4C): input columns cut
    "mlp.c_up.weight": (0, 1),  # SwiGLU's value projection (d_ff, C): output rows cut, as c_fc
}


def shard_spec(name: str, vocab_parallel: bool = False):
    """(dim, groups) for a sharded parameter name, None for a replicated one."""
    if vocab_parallel and name == "wte.weight":
        return 0, 1  # (V, C): vocabulary rows cut
    for suffix, spec in SHARDING.items():
        if name.endswith(suffix):
            return spec
    return None


def rows(weight: torch.Tensor, dim: int, start: int, end: int, groups: int = 1) -> torch.Tensor:
    """Units [start, end) of `weight` along `dim`, in each of `groups` stacked blocks (an even
    or an uneven share)."""
    blocks = weight.chunk(groups, dim=dim)  # groups × (…, size/groups, …)
    return torch.cat([b.narrow(dim, start, end - start) for b in blocks], dim=dim).clone()


def shard_weight(weight: torch.Tensor, dim: int, rank: int, tp: int, groups: int = 1):
    """Rank's slice of `weight` along `dim`, each of `groups` stacked blocks cut separately."""
    blocks = weight.chunk(groups, dim=dim)  # groups × (…, size/groups, …)
    return torch.cat([b.chunk(tp, dim=dim)[rank] for b in blocks], dim=dim).clone()


def unshard_weight(shards: list[torch.Tensor], dim: int, groups: int = 1):
    """Inverse of shard_weight: shards of every rank (in tp order) -> the full weight."""
    per_rank = [s.chunk(groups, dim=dim) for s in shards]  # tp × groups
    return torch.cat([torch.cat([p[g] for p in per_rank], dim=dim) for g in range(groups)], dim=dim)


def assemble_state(states: list[dict], vocab_parallel: bool = False, kv_copies: int = 1) -> dict:
    """Full reference-named state from every tp rank's local state (in tp order); `kv_copies`:
    how many consecutive ranks hold a copy of each key/value head (tp > n_kv_head)."""
    full = {}
    for name, value in states[0].items():
        spec = shard_spec(name, vocab_parallel)
        shards = [s[name] for s in states]
        if spec == (0, 3) and (kv_copies > 1 or sum(w.size(0) for w in shards) != 3 * value.size(1)):
            full[name] = unshard_grouped_qkv(shards, kv_copies)  # grouped-query [q; k; v]
            continue
        full[name] = value if spec is None else unshard_weight(shards, *spec)
    return full


def unshard_grouped_qkv(shards: list[torch.Tensor], kv_copies: int = 1) -> torch.Tensor:
    """Grouped-query attention's c_attn from every tp rank's [q_r; k_r; v_r] (even shares): the
    full q is C rows (C = the input width), k and v the rest in halves, each cut in tp — or, with
    `kv_copies` ranks holding each key/value head, taken from the first rank of each copy group."""
    tp, C = len(shards), shards[0].size(1)
    q_r = C // tp
    kv_r = (shards[0].size(0) - q_r) // 2
    parts = [s.split([q_r, kv_r, kv_r], dim=0) for s in shards]  # tp × (q_r, kv_r, kv_r rows)
    return torch.cat([torch.cat([p[0] for p in parts], dim=0)]
                     + [torch.cat([p[g] for p in parts[::kv_copies]], dim=0) for g in (1, 2)], dim=0)


class ColumnParallelLinear(nn.Module):
    """y_i = x·A_iᵀ for this rank's rows A_i of the weight (out/tp, in), no bias.

    Input: the full x (B, T, C) through f, or with sequence parallelism the shard (B, T/tp, C),
    all-gathered (ḡ); `regather=True` saves only the shard and gathers again in backward;
    `ring_overlap` (set by `parlab.tensor_parallel.async_ops.apply_async_tp`) overlaps that
    all-gather with the matmul, chunk by chunk."""

    ring_overlap = False

    def __init__(self, weight: torch.Tensor, comm, sequence_parallel=False, regather=True):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.comm, self.sequence_parallel, self.regather = comm, sequence_parallel, regather

    def forward(self, x):
        if not self.sequence_parallel:
            return F.linear(CopyToTensorParallel.apply(x, self.comm), self.weight)  # (B, T, out/tp)
        if self.regather and self.ring_overlap:
            return RingGatherMatmul.apply(x, self.weight, self.comm)  # (B, T, out/tp)
        if self.regather:
            return GatheredColumnMatmul.apply(x, self.weight, self.comm)  # (B, T, out/tp)
        full = GatherFromSequenceParallel.apply(x, self.comm)  # (B, T/tp, C) -> (B, T, C)
        return F.linear(full, self.weight)  # (B, T, out/tp)


class RowParallelLinear(nn.Module):
    """z = Σ_i y_i·B_iᵀ for this rank's columns B_i of the weight (out, in/tp), no bias: the
    partial sums are all-reduced (g), or reduce-scattered along the sequence (SP)."""

    def __init__(self, weight: torch.Tensor, comm, sequence_parallel=False):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.comm, self.sequence_parallel = comm, sequence_parallel

    def forward(self, y):
        partial = F.linear(y, self.weight)  # (B, T, out) this rank's partial sum
        if self.sequence_parallel:
            return ReduceScatterToSequenceParallel.apply(partial, self.comm)  # (B, T/tp, out)
        return ReduceFromTensorParallel.apply(partial, self.comm)  # (B, T, out)


class ParallelAttention(CausalSelfAttention):
    """Causal self-attention over this rank's heads [h0, h1): the GPT's own attention
    (`parlab.models.gpt.CausalSelfAttention`, which reads the head count from the width) with a
    column-parallel q, k, v and a row-parallel output projection plugged in. `column`, `row`:
    weight slice -> linear (`ColumnParallelLinear` / `RowParallelLinear`, or chapter 11's uneven
    `parlab.heterogeneous.tp_layers.GatheredShard` / `ScatteredShard`)."""

    def __init__(self, attn, heads: tuple[int, int], column, row):
        lo, hi = heads[0] * attn.head_dim, heads[1] * attn.head_dim
        if attn.n_kv_head is not None or attn.rope_theta is not None:  # GQA / RoPE
            self._grouped(attn, heads, column, row)
            return
        c_attn = column(rows(attn.c_attn.weight.detach(), 0, lo, hi, 3))  # (3·h_r·hs, C)
        c_proj = row(rows(attn.c_proj.weight.detach(), 1, lo, hi))  # (C, h_r·hs)
        super().__init__(c_attn, c_proj, heads[1] - heads[0], attn.head_dim)

    def _grouped(self, attn, heads: tuple[int, int], column, row):
        """Grouped-query attention (Ainslie et al. 2023) over this rank's query heads [h0, h1)
        and the key/value heads they read, [h0, h1) / (nh / n_kv): whole groups per rank when tp
        divides n_kv; past tp = n_kv (tp a multiple of n_kv) the rank's query heads lie inside one
        group and it holds a copy of that group's key/value head (`parlab.tensor_parallel.gqa`:
        the copies' gradients are summed by `gqa.sync_replicated_kv`)."""
        hs, nh = attn.head_dim, attn.n_head
        nkv = attn.n_kv_head or nh
        group = nh // nkv
        k0, k1 = heads[0] // group, -(-heads[1] // group)  # this rank's key/value heads
        whole = heads[0] % group == 0 and heads[1] % group == 0
        if not whole and not (k1 - k0 == 1 and group % (heads[1] - heads[0]) == 0):
            raise ValueError(f"query heads {heads} split a group of {group} sharing one key/value "
                             f"head unevenly: tp and n_kv_head={nkv} must divide one another")
        q, k, v = attn.c_attn.weight.detach().split([nh * hs, nkv * hs, nkv * hs], dim=0)
        c_attn = column(torch.cat([q[heads[0] * hs:heads[1] * hs], k[k0 * hs:k1 * hs],
                                   v[k0 * hs:k1 * hs]], dim=0).clone())  # ((h_r + 2·kv_r)·hs, C)
        c_proj = row(rows(attn.c_proj.weight.detach(), 1, heads[0] * hs, heads[1] * hs))  # (C, h_r·hs)
        super().__init__(c_attn, c_proj, heads[1] - heads[0], hs, k1 - k0, attn.rope_theta)


class ParallelMLP(MLPBlock):
    """GeLU(x·A)·B over this rank's hidden columns [c0, c1) of 4C: A column-parallel, B
    row-parallel, the GPT's MLP with sharded linears plugged in."""

    def __init__(self, mlp, columns: tuple[int, int], column, row):
        lo, hi = columns
        super().__init__(column(rows(mlp.c_fc.weight.detach(), 0, lo, hi)),  # (c_r, C)
                         row(rows(mlp.c_proj.weight.detach(), 1, lo, hi)))  # (C, c_r)


class ParallelSwiGLU(SwiGLU):
    """SwiGLU (Shazeer 2020) over this rank's hidden columns [c0, c1) of d_ff: the gate c_fc and
    the value c_up column-parallel (the product SiLU(x·W) ⊙ x·V is column by column, so it needs
    no communication), c_proj row-parallel — Megatron's MLP split with one more column linear."""

    def __init__(self, mlp, columns: tuple[int, int], column, row):
        lo, hi = columns
        super().__init__(column(rows(mlp.c_fc.weight.detach(), 0, lo, hi)),  # (c_r, C)
                         column(rows(mlp.c_up.weight.detach(), 0, lo, hi)),  # (c_r, C)
                         row(rows(mlp.c_proj.weight.detach(), 1, lo, hi)))  # (C, c_r)


def even_linears(comm, sequence_parallel=False, regather=True):
    """(column, row): weight slice -> Megatron's column- / row-parallel linear over `comm`."""
    return (partial(ColumnParallelLinear, comm=comm, sequence_parallel=sequence_parallel,
                    regather=regather),
            partial(RowParallelLinear, comm=comm, sequence_parallel=sequence_parallel))


def even_bounds(size: int, tp: int, rank: int) -> tuple[int, int]:
    """[start, end) of rank's size/tp units."""
    return rank * size // tp, (rank + 1) * size // tp


class ParallelBlock(Block):
    """The GPT's pre-LayerNorm block with rank's even share of the heads and MLP columns; the
    LayerNorms are replicated (and see only the sequence shard with SP)."""

    def __init__(self, block, comm, rank, tp, sequence_parallel=False, regather=True):
        column, row = even_linears(comm, sequence_parallel, regather)
        heads = even_bounds(block.attn.n_head, tp, rank)
        columns = even_bounds(block.mlp.c_fc.weight.size(0), tp, rank)
        super().__init__(copy.deepcopy(block.ln_1), ParallelAttention(block.attn, heads, column, row),
                         copy.deepcopy(block.ln_2), ParallelMLP(block.mlp, columns, column, row))


def replicated_parameters(model, vocab_parallel: bool = False) -> list:
    """The parameters every tp rank holds whole (embeddings, LayerNorms): with sequence
    parallelism each rank's gradient covers only its tokens, and the tp ranks' sum is the
    gradient."""
    return [p for n, p in model.named_parameters() if shard_spec(n, vocab_parallel) is None]
