"""Megatron tensor parallelism for the tiny GPT: column- and row-parallel linears, split heads.

Shoeybi et al., "Megatron-LM" (2019), §3: in the MLP, Y = GeLU(X·A) with A split by *columns*
(A = [A₁ … A_tp]) lets every rank apply GeLU to its own Y_i = X·A_i with no communication; the
second matmul Z = Y·B with B split by *rows* gives each rank a partial sum Y_i·B_i, all-reduced
once (operator g). Attention splits the same way, by heads: the q, k, v projections are
column-parallel (rank i owns heads [i·nh/tp, (i+1)·nh/tp)), attention runs per head locally, and
the output projection is row-parallel. Per block: 2 all-reduces of (B, T, C) forward (g after
attention and MLP) and 2 backward (f before them). Korthikanti et al. (MLSys 2023) add sequence
parallelism: LayerNorms and residuals work on (B, T/tp, C), the all-reduces become all-gather /
reduce-scatter pairs (`parlab.tensor_parallel.ops`).

The parallel model is built by *slicing the reference model's weights* (`from_reference`), so it
computes exactly what the single process does; `SHARDING` says how every parameter is cut, and
`assemble_state` glues the shards back into the reference's parameter names and shapes.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from parlab.models.gpt import Block, CausalSelfAttention, MLPBlock, maybe_checkpoint
from parlab.tensor_parallel.async_ops import RingGatherMatmul
from parlab.tensor_parallel.ops import (
    CopyToTensorParallel,
    GatheredColumnMatmul,
    GatherFromSequenceParallel,
    ReduceFromTensorParallel,
    ReduceScatterToSequenceParallel,
)
from parlab.tensor_parallel.vocab import VocabParallelCrossEntropy, VocabParallelEmbedding

# parameter-name suffix -> (dimension cut, number of stacked groups cut separately)
SHARDING = {
    "attn.c_attn.weight": (0, 3),  # (3C, C): rows [q; k; v], each cut by heads
    "attn.c_proj.weight": (1, 1),  # (C, C): input columns cut by heads
    "mlp.c_fc.weight": (0, 1),  # (4C, C): output rows cut
    "mlp.c_proj.weight": (1, 1),  # (C, 4C): input columns cut
}


def shard_spec(name: str, vocab_parallel: bool = False):
    """(dim, groups) for a sharded parameter name, None for a replicated one."""
    if vocab_parallel and name == "wte.weight":
        return 0, 1  # (V, C): vocabulary rows cut
    for suffix, spec in SHARDING.items():
        if name.endswith(suffix):
            return spec
    return None


def shard_weight(weight: torch.Tensor, dim: int, rank: int, tp: int, groups: int = 1):
    """Rank's slice of `weight` along `dim`, each of `groups` stacked blocks cut separately."""
    blocks = weight.chunk(groups, dim=dim)  # groups × (…, size/groups, …)
    return torch.cat([b.chunk(tp, dim=dim)[rank] for b in blocks], dim=dim).clone()


def unshard_weight(shards: list[torch.Tensor], dim: int, groups: int = 1):
    """Inverse of shard_weight: shards of every rank (in tp order) -> the full weight."""
    per_rank = [s.chunk(groups, dim=dim) for s in shards]  # tp × groups
    return torch.cat([torch.cat([p[g] for p in per_rank], dim=dim) for g in range(groups)], dim=dim)


def assemble_state(states: list[dict], vocab_parallel: bool = False) -> dict:
    """Full reference-named state from every tp rank's local state (in tp order)."""
    full = {}
    for name, value in states[0].items():
        spec = shard_spec(name, vocab_parallel)
        full[name] = value if spec is None else unshard_weight([s[name] for s in states], *spec)
    return full


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
    """Causal self-attention with this rank's nh/tp heads: the GPT's own attention
    (`parlab.models.gpt.CausalSelfAttention`, which reads the head count from the width) with
    column-parallel q, k, v and a row-parallel output projection plugged in."""

    def __init__(self, attn, comm, rank: int, tp: int, sequence_parallel=False, regather=True):
        c_attn = ColumnParallelLinear(shard_weight(attn.c_attn.weight.detach(), 0, rank, tp, 3),
                                      comm, sequence_parallel, regather)  # (3C/tp, C)
        c_proj = RowParallelLinear(shard_weight(attn.c_proj.weight.detach(), 1, rank, tp),
                                   comm, sequence_parallel)  # (C, C/tp)
        super().__init__(c_attn, c_proj, attn.n_head // tp, attn.head_dim)


class ParallelMLP(MLPBlock):
    """GeLU(x·A)·B with A column-parallel (4C/tp columns here) and B row-parallel: the GPT's MLP
    with sharded linears plugged in."""

    def __init__(self, mlp, comm, rank: int, tp: int, sequence_parallel=False, regather=True):
        super().__init__(ColumnParallelLinear(shard_weight(mlp.c_fc.weight.detach(), 0, rank, tp),
                                              comm, sequence_parallel, regather),  # (4C/tp, C)
                         RowParallelLinear(shard_weight(mlp.c_proj.weight.detach(), 1, rank, tp),
                                           comm, sequence_parallel))  # (C, 4C/tp)


class ParallelBlock(Block):
    """The GPT's pre-LayerNorm block with parallel attention and MLP; the LayerNorms are
    replicated (and see only the sequence shard with SP)."""

    def __init__(self, block, comm, rank, tp, sequence_parallel=False, regather=True):
        super().__init__(_copy(block.ln_1),
                         ParallelAttention(block.attn, comm, rank, tp, sequence_parallel, regather),
                         _copy(block.ln_2),
                         ParallelMLP(block.mlp, comm, rank, tp, sequence_parallel, regather))


def _copy(module: nn.Module) -> nn.Module:
    return copy.deepcopy(module)


class TensorParallelGPT(nn.Module):
    """The tiny GPT on one tp rank: blocks split, embeddings / LayerNorms / tied head replicated.

    With sequence parallelism the rank embeds only its T/tp positions, and its loss is the sum
    of its tokens' losses divided by all B·T tokens: the tp ranks' losses add up to the mean.
    The replicated parameters then see only their tokens, so their gradients are summed over tp
    (`replicated_parameters`)."""

    def __init__(self, model, comm, rank: int, tp: int, sequence_parallel=False, regather=True,
                 vocab_parallel=False):
        super().__init__()
        self.config, self.rank, self.tp, self.comm = model.config, rank, tp, comm
        self.sequence_parallel, self.vocab_parallel = sequence_parallel, vocab_parallel
        self.activation_checkpointing = getattr(model, "activation_checkpointing", False)
        self.wpe, self.ln_f = _copy(model.wpe), _copy(model.ln_f)
        if vocab_parallel:  # tied embedding / head cut by vocabulary rows (parlab.tensor_parallel.vocab)
            self.vocab_start = rank * model.config.vocab_size // tp
            self.wte = VocabParallelEmbedding(shard_weight(model.wte.weight.detach(), 0, rank, tp),
                                              comm, self.vocab_start)
        else:
            self.wte = _copy(model.wte)
        self.blocks = nn.ModuleList(ParallelBlock(b, comm, rank, tp, sequence_parallel, regather)
                                    for b in model.blocks)

    @classmethod
    def from_reference(cls, model, comm, sequence_parallel=False, regather=True,
                       vocab_parallel=False):
        return cls(model, comm, comm.rank, comm.size, sequence_parallel, regather, vocab_parallel)

    def replicated_parameters(self):
        return [p for n, p in self.named_parameters() if shard_spec(n, self.vocab_parallel) is None]

    def local_positions(self, T: int) -> slice:
        if not self.sequence_parallel:
            return slice(0, T)
        width = T // self.tp
        return slice(self.rank * width, (self.rank + 1) * width)

    def loss(self, idx, targets):
        B, T = idx.shape
        mine = self.local_positions(T)
        x = shard_hidden(self, idx, mine)  # (B, T/tp, C) with SP, else (B, T, C)
        if self.vocab_parallel:
            h = CopyToTensorParallel.apply(self.ln_f(x), self.comm)  # (B, T, C) f before the head
            logits = (h @ self.wte.weight.t()).float()  # (B, T, V/tp) this rank's words, fp32 loss
            losses = VocabParallelCrossEntropy.apply(logits, targets.clone(), self.comm,
                                                     self.vocab_start)  # (B, T)
            return losses.sum() / (B * T)
        return shard_loss(self, x, targets, mine)  # this rank's share of the mean over B·T


def shard_hidden(model, idx, positions: slice):
    """Embed the tokens at `positions` (a rank's sequence shard, or all of them) and run the
    blocks: idx (B, T) -> (B, t, C). The embedding looks up a copy of the shard's ids, so its
    backward keeps only these. Shared by every sequence-sharded tensor-parallel GPT (even,
    uneven in `parlab.heterogeneous.tp_layers`, PyTorch's in `torch_tp`)."""
    tokens = idx[:, positions].clone()  # (B, t)
    x = model.wte(tokens) + model.wpe(torch.arange(positions.start, positions.stop))  # (B, t, C)
    for block in model.blocks:  # checkpointed blocks redo their forward comm in backward
        x = maybe_checkpoint(block, model.activation_checkpointing, x)  # (B, t, C)
    return x


def shard_loss(model, x, targets, positions: slice, fp32_logits: bool = True):
    """The tied head and the *summed* cross-entropy of the shard's tokens, divided by all B·T
    tokens: the ranks' losses add up to the mean loss of the single process."""
    B, T = targets.shape
    logits = model.ln_f(x) @ model.wte.weight.t()  # (B, t, vocab) tied head
    if fp32_logits:
        logits = logits.float()  # the loss in fp32 also in mixed precision, as the reference
    losses = F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                             targets[:, positions].reshape(-1).clone(), reduction="sum")
    return losses / (B * T)
