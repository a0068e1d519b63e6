"""All-gather context parallelism: gather every rank's keys and values, then attend locally.

Paper: Dubey et al., "The Llama 3 Herd of Models" (2024, arXiv 2407.21783), §3.3.2. Llama 3
splits the sequence into 2·cp chunks, rank r holding chunks r and 2cp−1−r (load balance under the
causal mask, as the zig-zag ring), and, in each layer, all-gathers K and V before computing
attention for its own queries: the all-gather cannot overlap the attention as a ring's transfers
do, but it is one collective instead of cp−1 exchanges, it works for any mask, and with
grouped-query attention K and V are small beside Q (Llama 3: 8 key/value heads for 32 query
heads). Backward reduce-scatters dK, dV: each rank keeps the summed gradient of its own shard.

Bytes per rank and layer (`cost.allgather_bytes`): the all-gather sends (cp−1) K/V shards,
2·(cp−1)·B·nh·(T/cp)·hs elements, forward; the reduce-scatter the same backward — the ring's
bytes exactly, in one collective per layer and direction. Simplification, stated: the package's
GQA repeats the key/value heads before `attend` (`parlab.models.llama_parts.grouped_heads`), so a
GQA model gathers n_head heads here, where Llama 3 gathers its n_kv.
"""

from __future__ import annotations

import torch

from parlab.context_parallel.ring_attention import block_attention, chunks_of


class GatherKV(torch.autograd.Function):
    """Forward: all-gather this rank's stacked K/V along the tokens (rank order). Backward:
    reduce-scatter the gathered gradient, so each rank receives Σ over ranks of its shard's."""

    @staticmethod
    def forward(ctx, kv, comm):
        ctx.comm = comm
        return comm.all_gather(kv, dim=3, phase="cp-forward")  # (2, B, nh, Tl, hs) -> (2, B, nh, T, hs)

    @staticmethod
    def backward(ctx, grad):
        shard = ctx.comm.reduce_scatter(grad.contiguous(), op="sum", dim=3,
                                        phase="cp-backward")  # (2, B, nh, T, hs) -> (2, B, nh, Tl, hs)
        return shard, None


def allgather_attention(q, k, v, comm, positions: list[torch.Tensor], causal: bool = True,
                        chunks: list[list[int]] | None = None):
    """Exact attention for this rank's queries after gathering every rank's K and V.

    q, k, v (B, nh, Tl, hs): this rank's tokens at `positions[comm.rank]` (every rank's positions
    known to all). The gathered keys are put back in sequence order; with `causal`, each of the
    rank's two chunks attends only to the keys up to its own last position (Llama 3's local
    attention: zig-zag chunks r and 2cp−1−r give every rank 2cp+1 chunks of keys). chunks:
    every rank's two chunk indices (`ring_attention.all_chunks`), Python ints, so a shapes-only
    run (no positions to read) cuts the same keys; None: read from `positions`."""
    me = comm.rank
    kv = torch.stack([k, v])  # (2, B, nh, Tl, hs)
    gathered = GatherKV.apply(kv, comm) if comm.size > 1 else kv  # (2, B, nh, T, hs), rank order
    order = torch.argsort(torch.cat(positions))  # (T,): the sequence order of the gathered tokens
    kv_seq = gathered.index_select(3, order)  # (2, B, nh, T, hs) in sequence order
    q_pos = positions[me]
    if not causal:
        return block_attention(q, kv_seq[0], kv_seq[1])[0]  # (B, nh, Tl, hs)
    half = q.size(2) // 2
    mine = (chunks or chunks_of(positions))[me]
    outs = []
    for part, qp, c in ((q[:, :, :half], q_pos[:half], mine[0]),
                        (q[:, :, half:], q_pos[half:], mine[1])):
        end = (c + 1) * half  # keys 0 .. the last position of chunk c (chunks of `half` tokens)
        k_pos = torch.arange(end)  # (end,)
        mask = k_pos[None, :] <= qp[:, None]  # (Tl/2, end)
        outs.append(block_attention(part, kv_seq[0][:, :, :end], kv_seq[1][:, :, :end],
                                    mask)[0])  # (B, nh, Tl/2, hs)
    return torch.cat(outs, dim=2)  # (B, nh, Tl, hs)
