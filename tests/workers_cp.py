"""Rank workers for the context-parallel tests: sharded attention vs full attention on every rank."""

import torch

from parlab.context_parallel import ring_attention as ring
from parlab.context_parallel.ring_recompute import ring_attention_recompute
from parlab.context_parallel.ulysses import ulysses_attention
from parlab.core.comm import Comm


def distance_bias(q_pos, k_pos, heads=None, n_head=4):
    """A per-head score bias that depends on both positions (like the video denoiser's)."""
    slopes = torch.tensor([0.5 ** i for i in range(n_head)])  # (nh,)
    slopes = slopes if heads is None else slopes[heads]
    return -slopes[:, None, None] * (q_pos[:, None] - k_pos[None, :]).abs().float()  # (h, Tq, Tk)


def attention_check(rank, world_size, method, layout, causal, with_bias, seq_len=16, seed=0):
    """Forward and backward of sharded attention against full attention computed on this rank."""
    comm = Comm(None)
    g = torch.Generator().manual_seed(seed)
    B, nh, hs = 2, 4, 8
    q, k, v, grad = (torch.randn(B, nh, seq_len, hs, generator=g) for _ in range(4))
    bias_fn = distance_bias if with_bias else None
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    pos = torch.arange(seq_len)
    full, _ = ring.block_attention(q, k, v, (pos[None, :] <= pos[:, None]) if causal else None,
                                   bias_fn(pos, pos) if with_bias else None)  # (B, nh, T, hs)
    full.backward(grad)
    positions = ring.all_positions(layout, world_size, seq_len)
    mine = positions[rank]
    ql, kl, vl = (t.detach()[:, :, mine].clone().requires_grad_() for t in (q, k, v))
    if method == "ring":
        out = ring.ring_attention(ql, kl, vl, comm, positions, causal, bias_fn)
    elif method == "ring-recompute":
        out = ring_attention_recompute(ql, kl, vl, comm, positions, causal, bias_fn)
    else:
        out = ulysses_attention(ql, kl, vl, comm, positions, causal, bias_fn)
    out.backward(grad[:, :, mine])
    diffs = [(out - full[:, :, mine]).abs().max().item()]
    diffs += [(a.grad - b.grad[:, :, mine]).abs().max().item() for a, b in ((ql, q), (kl, k), (vl, v))]
    return {"diffs": diffs, "records": comm.ledger.records}
