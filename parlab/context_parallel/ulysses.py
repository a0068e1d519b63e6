"""DeepSpeed-Ulysses: trade the sequence split for a head split with all-to-all, attend, trade back.

Paper: Jacobs et al., "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme
Long Sequence Transformer Models" (2023, arXiv 2309.14509).

The idea. Outside attention every token is independent, so the sequence can be split across cp
ranks. Attention needs every key — but heads are independent. An all-to-all turns
"my T/cp tokens, all nh heads" into "all T tokens, my nh/cp heads"; each rank then runs plain
attention for its heads over the whole sequence, and a second all-to-all turns the output back.
Per layer forward: three all-to-alls (q, k, v) in and one (the output) back — four — each moving
(cp−1)/cp of a (B, nh, T/cp, hs) tensor per rank; backward runs the same four the other way.
Unlike ring attention the traffic per rank shrinks as cp grows (1/cp of the activations,
vs K and V whole for the ring), but cp cannot exceed the number of heads.
"""

from __future__ import annotations

import torch

from parlab.context_parallel.ring_attention import block_attention


def _seq_to_heads(x, comm, phase):
    """(B, nh, T/cp, hs) this rank's tokens -> (B, nh/cp, T, hs) this rank's heads."""
    pieces = list(x.chunk(comm.size, dim=1))  # cp × (B, nh/cp, T/cp, hs): piece j to rank j
    received = comm.all_to_all(pieces, phase=phase)  # cp × (B, nh/cp, T/cp, hs) from rank i
    return torch.cat(received, dim=2)  # (B, nh/cp, T, hs), tokens in rank order


def _heads_to_seq(x, comm, phase):
    """(B, nh/cp, T, hs) this rank's heads -> (B, nh, T/cp, hs) this rank's tokens."""
    pieces = list(x.chunk(comm.size, dim=2))  # cp × (B, nh/cp, T/cp, hs): rank j's tokens
    received = comm.all_to_all(pieces, phase=phase)  # cp × (B, nh/cp, T/cp, hs), heads of rank i
    return torch.cat(received, dim=1)  # (B, nh, T/cp, hs)


class SeqToHeads(torch.autograd.Function):
    """Forward: all-to-all from sequence-sharded to head-sharded (each rank sends every other rank
    its tokens of that rank's heads). Backward: the gradient goes back head- to sequence-sharded."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return _seq_to_heads(x, comm, "cp-forward")  # (B, nh/cp, T, hs)

    @staticmethod
    def backward(ctx, grad):
        return _heads_to_seq(grad, ctx.comm, "cp-backward"), None  # (B, nh, T/cp, hs)


class HeadsToSeq(torch.autograd.Function):
    """Forward: all-to-all from head-sharded back to sequence-sharded (the attention output).
    Backward: the output's gradient goes sequence- to head-sharded."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return _heads_to_seq(x, comm, "cp-forward")  # (B, nh, T/cp, hs)

    @staticmethod
    def backward(ctx, grad):
        return _seq_to_heads(grad, ctx.comm, "cp-backward"), None  # (B, nh/cp, T, hs)


def ulysses_attention(q, k, v, comm, positions: list[torch.Tensor], causal: bool = True,
                      bias_fn=None):
    """Exact attention for this rank's tokens; q, k, v (B, nh, T/cp, hs) at positions[comm.rank].

    positions: every rank's token positions; after the all-to-all the sequence is in rank order,
    so the causal mask is built from their concatenation (any split works, zig-zag included).
    bias_fn(q_pos, k_pos, heads) -> (len(heads), Tq, Tk) adds a score bias for the given heads.
    """
    q_h = SeqToHeads.apply(q, comm)  # (B, nh/cp, T, hs)
    k_h = SeqToHeads.apply(k, comm)  # (B, nh/cp, T, hs)
    v_h = SeqToHeads.apply(v, comm)  # (B, nh/cp, T, hs)
    pos = torch.cat(positions)  # (T,) in rank order
    mask = (pos[None, :] <= pos[:, None]) if causal else None  # (T, T)
    local_heads = q.size(1) // comm.size
    heads = torch.arange(comm.rank * local_heads, (comm.rank + 1) * local_heads)
    bias = bias_fn(pos, pos, heads) if bias_fn is not None else None  # (nh/cp, T, T)
    out, _ = block_attention(q_h, k_h, v_h, mask, bias)  # (B, nh/cp, T, hs)
    return HeadsToSeq.apply(out, comm)  # (B, nh, T/cp, hs)


