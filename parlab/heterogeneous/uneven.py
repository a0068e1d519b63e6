"""Uneven all-gather and reduce-scatter: padded to the largest shard, or of exactly each rank's size.

When shards follow device speeds (Zhang et al., "HAP: SPMD DNN Training on Heterogeneous GPU
Clusters with Automated Program Synthesis", EuroSys 2024, §5), rank r holds S_r of S = Σ_r S_r
rows. padded: every shard padded to M = max_r S_r, the even collective on N·M rows, (N−1)·M rows
sent per rank. exact: a ring whose chunks are the shards — all-gather S − S_{r+1} rows
(`Comm.all_gather(sizes=, algo="ring")`), reduce-scatter S − S_r (`ring_reduce_scatter`).
A pipelined ring lasts about as long as its busiest sender: exact is faster when one shard is
much larger ([6, 2, 2, 2]: 10 rows against 18), no faster with one small shard ([3, 3, 3, 1]: 9
either way). Both use the hand-written ring, so a difference in time is the padding's alone.
Bytes: `parlab.heterogeneous.cost.uneven_bytes`. In full: docs/heterogeneous.md,
`parlab.heterogeneous.uneven`.
"""

from __future__ import annotations

import torch

from parlab.core.cost import chunk_bounds

VARIANTS = ("padded", "exact")
FORWARD, BACKWARD = "tp-forward", "tp-backward"


def _pad(shard: torch.Tensor, rows: int) -> torch.Tensor:
    """`shard` (S_r, ...) with zero rows appended up to (rows, ...)."""
    if shard.shape[0] == rows:
        return shard.contiguous()
    pad = shard.new_zeros((rows - shard.shape[0],) + tuple(shard.shape[1:]))  # (M − S_r, ...)
    return torch.cat([shard, pad])  # (M, ...)


def ring_reduce_scatter(comm, full: torch.Tensor, sizes: list[int], phase=None) -> torch.Tensor:
    """Exact-size ring reduce-scatter of `full` (S, ...) along dim 0 cut into `sizes`: returns this
    rank's chunk (S_r, ...) summed over the group. In step k rank r sends its partial sum of chunk
    r−k−1 to r+1 and adds its own rows to chunk r−k−2 received from r−1; after N−1 steps it holds
    chunk r (Thakur, Rabenseifner & Gropp, IJHPCA 2005, §4), having sent S − S_r rows."""
    n, r = comm.size, comm.rank
    chunks = [full[lo:hi] for lo, hi in chunk_bounds(sizes)]  # N × (S_k, ...)
    if n == 1:
        return chunks[0].clone()  # (S, ...)
    acc = chunks[(r - 1) % n].contiguous()  # (S_{r-1}, ...) the first partial sum to pass on
    nxt, prv = (r + 1) % n, (r - 1) % n
    for k in range(n - 1):
        incoming = (r - k - 2) % n
        buf = torch.empty_like(chunks[incoming])  # (S_{r-k-2}, ...)
        handle = comm.isend(acc, nxt, phase=phase) if acc.numel() else None  # (S_{r-k-1}, ...)
        if buf.numel():
            comm.recv(buf, prv, phase=phase)  # (S_{r-k-2}, ...) r−1's partial sum
        if handle is not None:
            handle.wait()
        acc = buf + chunks[incoming]  # (S_{r-k-2}, ...) plus this rank's rows
    return acc  # (S_r, ...) summed over every rank


def all_gather(comm, shard, sizes, dim: int, variant: str, phase=None) -> torch.Tensor:
    """Every rank's shard (..., S_r, ...) along `dim` → (..., S, ...), padded or exact."""
    if variant == "exact":
        return comm.all_gather(shard, dim=dim, sizes=sizes, algo="ring", phase=phase)  # (.., S, ..)
    width = max(sizes)
    padded = _pad(shard.movedim(dim, 0), width)  # (M, ...) this rank's rows, then zeros
    full = comm.all_gather(padded, dim=0, algo="ring", phase=phase)  # (N·M, ...)
    parts = [full[k * width:k * width + s] for k, s in enumerate(sizes)]  # N × (S_k, ...)
    return torch.cat(parts).movedim(0, dim)  # (..., S, ...)


def reduce_scatter(comm, full, sizes, dim: int, variant: str, phase=None) -> torch.Tensor:
    """Sum (..., S, ...) over the group and keep this rank's rows (..., S_r, ...) along `dim`."""
    moved = full.movedim(dim, 0).contiguous()  # (S, ...)
    if variant == "exact":
        return ring_reduce_scatter(comm, moved, sizes, phase).movedim(0, dim)  # (..., S_r, ...)
    width = max(sizes)
    padded = torch.cat([_pad(moved[lo:hi], width) for lo, hi in chunk_bounds(sizes)])  # (N·M, ...)
    mine = comm.reduce_scatter(padded, dim=0, algo="ring", phase=phase)  # (M, ...) summed
    return mine[:sizes[comm.rank]].movedim(0, dim)  # (..., S_r, ...)


class GatherUneven(torch.autograd.Function):
    """Forward: all-gather the uneven sequence shards (B, t_r, C) into (B, T, C). Backward:
    reduce-scatter the gradient (B, T, C) back to (B, t_r, C), summing every rank's part (each
    rank's column linear saw all T positions). `variant`: "padded" or "exact"."""

    @staticmethod
    def forward(ctx, shard, comm, sizes, dim, variant):
        ctx.comm, ctx.sizes, ctx.dim, ctx.variant = comm, sizes, dim, variant
        return all_gather(comm, shard, sizes, dim, variant, phase=FORWARD)  # (B, T, C)

    @staticmethod
    def backward(ctx, grad):
        shard = reduce_scatter(ctx.comm, grad, ctx.sizes, ctx.dim, ctx.variant,
                               phase=BACKWARD)  # (B, T, C) -> (B, t_r, C)
        return shard, None, None, None, None


class ReduceScatterUneven(torch.autograd.Function):
    """Forward: reduce-scatter the partial sums (B, T, C) of a row-parallel linear into this rank's
    summed positions (B, t_r, C). Backward: all-gather the gradient (B, t_r, C) into (B, T, C)
    (every rank's partial sum fed every position). `variant`: "padded" or "exact"."""

    @staticmethod
    def forward(ctx, partial, comm, sizes, dim, variant):
        ctx.comm, ctx.sizes, ctx.dim, ctx.variant = comm, sizes, dim, variant
        return reduce_scatter(comm, partial, sizes, dim, variant, phase=FORWARD)  # (B, t_r, C)

    @staticmethod
    def backward(ctx, grad):
        full = all_gather(ctx.comm, grad.contiguous(), ctx.sizes, ctx.dim, ctx.variant,
                          phase=BACKWARD)  # (B, t_r, C) -> (B, T, C)
        return full, None, None, None, None
