"""Ring attention with a recomputing backward: O(T/cp) saved per rank, as in the paper.

Liu, Zaharia & Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite Context"
(ICLR 2024, arXiv 2310.01889), like FlashAttention's backward (Dao et al. 2022; Dao,
FlashAttention-2, 2023, Alg. 2), save only q, k, v, O and the log-sum-exp ℓ, and send K, V round
the ring again in backward, recomputing P = exp(S − ℓ):

    dV_b += Pᵀ·dO,  dP = dO·V_bᵀ,  dS = P ∘ (dP − rowsum(dO ∘ O)),  dQ += dS·K_b/√d,  dK_b += dSᵀ·Q/√d

Bytes: `parlab.context_parallel.cost.ring_recompute_bytes`; against the autograd-composed
`ring_attention`: docs/context_parallel.md, `parlab.context_parallel.ring_recompute`.
"""

from __future__ import annotations

import math

import torch

from parlab.context_parallel.ring_attention import (
    _causal_relation,
    _finish_exchange,
    _start_exchange,
    chunks_of,
    merge,
)


def _pairs(q_pos, k_pos, causal: bool, q_chunks=None, k_chunks=None):
    """(query slice, key slice, mask) of the score blocks to compute between this rank's queries
    and one key block: two chunks each when causal (chunk pairs above the diagonal skipped, by
    the chunk indices q_chunks, k_chunks: Python ints, `ring_attention.all_chunks`)."""
    if not causal:
        yield slice(None), slice(None), None
        return
    half = q_pos.numel() // 2
    for i in range(2):
        qs, qp = slice(i * half, (i + 1) * half), q_pos[i * half:(i + 1) * half]
        for j in range(2):
            ks, kp = slice(j * half, (j + 1) * half), k_pos[j * half:(j + 1) * half]
            relation = _causal_relation(q_chunks[i], k_chunks[j])
            if relation != "skip":
                yield qs, ks, (kp[None, :] <= qp[:, None]) if relation == "diagonal" else None


def _scores(q, k, mask, bias, scale):
    s = (q @ k.transpose(-2, -1)) * scale  # (B, nh, Tq, Tk)
    if bias is not None:
        s = s + bias
    return s.masked_fill(~mask, float("-inf")) if mask is not None else s


class RingAttentionRecompute(torch.autograd.Function):
    """Forward: K/V blocks go round the ring (to r+1, from r−1) cp−1 times while each rank merges
    its partial attentions. Backward: K/V go round again cp−1 times, and each block's dK/dV
    accumulator travels with it, cp hops, back to the rank that owns the block."""

    @staticmethod
    def forward(ctx, q, k, v, comm, positions, causal, bias_fn, chunks):
        n, me = comm.size, comm.rank
        scale = 1.0 / math.sqrt(q.size(-1))
        out = torch.zeros_like(q)  # (B, nh, Tl, hs)
        lse = torch.full(q.shape[:-1], float("-inf"))  # (B, nh, Tl)
        kv = torch.stack([k, v])  # (2, B, nh, Tl, hs)
        for step in range(n):
            pending = _start_exchange(kv, comm, (me + 1) % n, (me - 1) % n, "cp-forward") \
                if step < n - 1 else None
            k_pos = positions[(me - step) % n]
            for qs, ks, mask in _pairs(positions[me], k_pos, causal, *_chunk_pair(chunks, me, step)):
                bias = bias_fn(positions[me][qs], k_pos[ks], None) if bias_fn else None
                s = _scores(q[:, :, qs], kv[0][:, :, ks], mask, bias, scale)  # (B, nh, tq, tk)
                part_lse = torch.logsumexp(s, dim=-1)  # (B, nh, tq)
                part = torch.exp(s - part_lse.unsqueeze(-1)) @ kv[1][:, :, ks]  # (B, nh, tq, hs)
                out[:, :, qs], lse[:, :, qs] = merge(out[:, :, qs], lse[:, :, qs], part, part_lse)
            if pending is not None:
                kv = _finish_exchange(pending)  # (2, B, nh, Tl, hs) from rank me−1
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.comm, ctx.positions, ctx.causal, ctx.bias_fn = comm, positions, causal, bias_fn
        ctx.chunks = chunks
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        comm, positions = ctx.comm, ctx.positions
        n, me = comm.size, comm.rank
        scale = 1.0 / math.sqrt(q.size(-1))
        delta = (d_out * out).sum(-1, keepdim=True)  # (B, nh, Tl, 1): rowsum(dO ∘ O)
        d_q = torch.zeros_like(q)  # (B, nh, Tl, hs)
        kv = torch.stack([k, v])  # (2, B, nh, Tl, hs)
        # Overlapped as the forward (Liu et al. §3): the next K/V block is posted before this
        # step's compute, and the dK/dV accumulator that arrives with a block is not needed until
        # the step's own contribution is computed (into a fresh buffer), so it travels during the
        # compute too and is added after; the same messages, cp−1 of K/V and cp of dK/dV.
        blocks = _start_exchange(kv, comm, (me + 1) % n, (me - 1) % n, "cp-backward") \
            if n > 1 else None
        grads = None  # the accumulator of the block this rank computes on, in flight from me−1
        for step in range(n):
            k_pos = positions[(me - step) % n]
            d_kv = torch.zeros_like(kv)  # (2, B, nh, Tl, hs): this step's contribution
            for qs, ks, mask in _pairs(positions[me], k_pos, ctx.causal,
                                       *_chunk_pair(ctx.chunks, me, step)):
                bias = ctx.bias_fn(positions[me][qs], k_pos[ks], None) if ctx.bias_fn else None
                s = _scores(q[:, :, qs], kv[0][:, :, ks], mask, bias, scale)  # (B, nh, tq, tk)
                p = torch.exp(s - lse[:, :, qs].unsqueeze(-1))  # (B, nh, tq, tk)
                do = d_out[:, :, qs]  # (B, nh, tq, hs)
                d_kv[1][:, :, ks] += p.transpose(-2, -1) @ do  # (B, nh, tk, hs)
                d_s = p * (do @ kv[1][:, :, ks].transpose(-2, -1) - delta[:, :, qs])
                d_q[:, :, qs] += (d_s @ kv[0][:, :, ks]) * scale  # (B, nh, tq, hs)
                d_kv[0][:, :, ks] += (d_s.transpose(-2, -1) @ q[:, :, qs]) * scale
            if grads is not None:
                d_kv += _finish_exchange(grads)  # (2, B, nh, Tl, hs) what ranks before added
            if n == 1:
                break
            # dK/dV move on with their block every step; after cp hops they are home
            grads = _start_exchange(d_kv, comm, (me + 1) % n, (me - 1) % n, "cp-backward")
            if blocks is not None:
                kv = _finish_exchange(blocks)  # (2, B, nh, Tl, hs) from rank me−1
                blocks = _start_exchange(kv, comm, (me + 1) % n, (me - 1) % n, "cp-backward") \
                    if step + 1 < n - 1 else None
        if grads is not None:
            d_kv = _finish_exchange(grads)  # (2, B, nh, Tl, hs) this rank's block, home again
        return d_q, d_kv[0], d_kv[1], None, None, None, None, None


def _chunk_pair(chunks, me: int, step: int):
    """(this rank's chunk indices, those of the block it holds at `step`), or (None, None)."""
    if chunks is None:
        return None, None
    return chunks[me], chunks[(me - step) % len(chunks)]


def ring_attention_recompute(q, k, v, comm, positions, causal: bool = True, bias_fn=None,
                             chunks: list[list[int]] | None = None):
    """Exact attention for this rank's tokens (as `ring_attention.ring_attention`), saving only
    q, k, v, O and ℓ for backward. q, k, v (B, nh, Tl, hs) at positions[comm.rank]; chunks:
    every rank's chunk indices (`ring_attention.all_chunks`; None: read from the positions)."""
    if causal and chunks is None:
        chunks = chunks_of(positions)
    return RingAttentionRecompute.apply(q, k, v, comm, positions, causal, bias_fn, chunks)


