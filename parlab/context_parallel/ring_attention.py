"""Ring attention: exact attention over a sequence sharded across cp ranks, K/V passed round a ring.

Papers. Online softmax: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018,
arXiv 1805.02867), the rule FlashAttention (Dao et al., NeurIPS 2022) computes blockwise with.
Ring attention: Liu, Zaharia & Abbeel, "Ring Attention with Blockwise Transformers for
Near-Infinite Context" (ICLR 2024, arXiv 2310.01889). Zig-zag split for causal balance: Brandon et
al., "Striped Attention" (2023, arXiv 2311.09431) and the Llama 3 paper (Dubey et al. 2024, §3.3.2).

Two partial outputs over key blocks merge exactly by their log-sum-exps:

    l = log(e^{l_a} + e^{l_b}),   o = e^{l_a − l}·o_a + e^{l_b − l}·o_b

so each rank attends to one K/V block at a time and passes it on (`RingPass`); dK, dV travel
back (`parlab.context_parallel.cost.ring_bytes`); zig-zag chunks balance the causal work
(`cost.causal_work`). The derivation, memory and the balance: docs/context_parallel.md,
`parlab.context_parallel.ring_attention`.
"""

from __future__ import annotations

import math

import torch

LAYOUTS = ("zigzag", "contiguous")


# ----------------------------------------------------------------------------- the split
def layout_chunks(layout: str, rank: int, cp: int) -> list[int]:
    """Which of the 2·cp equal chunks of the sequence `rank` holds, in order."""
    if layout == "zigzag":
        return [rank, 2 * cp - 1 - rank]
    if layout == "contiguous":
        return [2 * rank, 2 * rank + 1]
    raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")


def token_positions(layout: str, rank: int, cp: int, seq_len: int) -> torch.Tensor:
    """Positions (in the full sequence) of `rank`'s tokens, in the order the rank holds them.

    zigzag needs seq_len divisible by 2·cp; contiguous only by cp (the same split as chunks
    2r, 2r+1 when 2·cp divides it)."""
    if layout == "contiguous":
        return torch.arange(rank * seq_len // cp, (rank + 1) * seq_len // cp)
    c = seq_len // (2 * cp)
    return torch.cat([torch.arange(k * c, (k + 1) * c) for k in layout_chunks(layout, rank, cp)])


def all_positions(layout: str, cp: int, seq_len: int) -> list[torch.Tensor]:
    """token_positions of every rank (every rank knows where every other rank's tokens sit)."""
    return [token_positions(layout, r, cp, seq_len) for r in range(cp)]


def all_chunks(layout: str, cp: int) -> list[list[int]]:
    """layout_chunks of every rank: which chunk pairs causal attention skips is known from the
    layout, as Python ints, before any tensor exists (a shapes-only run has no positions to read)."""
    return [layout_chunks(layout, r, cp) for r in range(cp)]


def chunks_of(positions: list[torch.Tensor]) -> list[list[int]]:
    """Every rank's two chunk indices read from its token positions (2 chunks per rank): for a
    caller that gives positions only; the chunk of a run of positions is its first one's."""
    halves = [p.numel() // 2 for p in positions]
    return [[int(p[0]) // h, int(p[h]) // h] for p, h in zip(positions, halves)]


# ----------------------------------------------------------------------------- one block
class BlockAttention(torch.autograd.Function):
    """Attention of q over one block of keys -> (output normalised within the block, log-sum-exp).

    No communication: the compute step of every ring step. Forward saves q, k, v and the block's
    probabilities P (one score block, not the raw scores as well); backward is FlashAttention's
    (Dao et al. 2022, Alg. 4) plus the log-sum-exp's own gradient, which the merge rule needs:
    dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ∘ (dP − rowsum(dP ∘ P) + dlse), dQ = dS·K/√d, dK = dSᵀ·Q/√d.
    The mask and the bias are constants (no gradient).
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, bias):
        scale = 1.0 / math.sqrt(q.size(-1))
        scores = (q @ k.transpose(-2, -1)) * scale  # (B, nh, Tq, Tk)
        if bias is not None:
            scores = scores + bias
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)  # (B, nh, Tq); -inf for a row that sees no key
        finite = lse.masked_fill(torch.isinf(lse), 0.0)  # such a row gets output 0, weight e^-inf
        probs = torch.exp(scores - finite.unsqueeze(-1))  # (B, nh, Tq, Tk)
        ctx.save_for_backward(q, k, v, probs)
        ctx.scale = scale
        return probs @ v, lse  # (B, nh, Tq, hs), (B, nh, Tq)

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, probs = ctx.saved_tensors
        d_v = probs.transpose(-2, -1) @ d_out  # (B, nh, Tk, hs)
        d_probs = d_out @ v.transpose(-2, -1)  # (B, nh, Tq, Tk)
        row = (d_probs * probs).sum(-1, keepdim=True)  # (B, nh, Tq, 1)
        d_scores = probs * (d_probs - row + d_lse.unsqueeze(-1))  # (B, nh, Tq, Tk)
        d_q = (d_scores @ k) * ctx.scale  # (B, nh, Tq, hs)
        d_k = (d_scores.transpose(-2, -1) @ q) * ctx.scale  # (B, nh, Tk, hs)
        return d_q, d_k, d_v, None, None


def block_attention(q, k, v, mask=None, bias=None):
    """Attention of q over one block of keys: (output normalised within the block, log-sum-exp).

    q (B, nh, Tq, hs), k, v (B, nh, Tk, hs), mask (Tq, Tk) bool (True = may attend), bias
    broadcastable to (B, nh, Tq, Tk). A row that sees no key gets output 0 and lse −inf, which
    `merge` weighs by zero (the first block merged must give every row a key).
    """
    return BlockAttention.apply(q, k, v, mask, bias)


def merge(out_a, lse_a, out_b, lse_b):
    """The online-softmax rule: two partial attentions over disjoint keys -> one over both."""
    lse = torch.logaddexp(lse_a, lse_b)  # (B, nh, Tq)
    out = torch.exp(lse_a - lse).unsqueeze(-1) * out_a \
        + torch.exp(lse_b - lse).unsqueeze(-1) * out_b  # (B, nh, Tq, hs)
    return out, lse


def blockwise_attention(q, k, v, block: int, causal: bool = True):
    """Single-process check of the rule: attention over K/V blocks of `block` keys, merged."""
    T = k.size(-2)
    q_pos = torch.arange(q.size(-2)) + (T - q.size(-2))  # queries are the last Tq positions
    out = lse = None
    for start in range(0, T, block):
        k_pos = torch.arange(start, min(start + block, T))
        mask = (k_pos[None, :] <= q_pos[:, None]) if causal else None  # (Tq, block)
        part = block_attention(q, k[..., start:start + block, :], v[..., start:start + block, :],
                               mask)  # (B, nh, Tq, hs), (B, nh, Tq)
        out, lse = part if out is None else merge(out, lse, *part)
    return out


# ----------------------------------------------------------------------------- the ring
def _start_exchange(tensor, comm, to, frm, phase):
    """Post the send of `tensor` to group rank `to` and the receive of one like it from `frm`;
    returns the pair of handles (the transfer proceeds while this rank computes)."""
    incoming = torch.empty_like(tensor)
    send = comm.isend(tensor, to, phase=phase)  # (2, B, nh, T/cp, hs) out
    recv = comm.irecv(incoming, frm, phase=phase)  # (2, B, nh, T/cp, hs) in
    return send, recv


def _finish_exchange(handles):
    send, recv = handles
    send.wait()
    return recv.wait()


class _InFlight:
    """The gradient exchange a RingPass backward posted, for the ArriveGrad backward to finish."""

    handles = None
    grad = None  # the gradient being sent, kept alive while in flight


class RingPass(torch.autograd.Function):
    """One ring step. Forward: this K/V block goes to rank r+1 and rank r−1's arrives — the
    transfer is posted *before* this step's block attention and waited for after it (overlap,
    Liu et al. §3), so forward only attaches the received block to the graph. Backward: the
    gradient of the received block goes back to rank r−1 and, from r+1, the gradient of the
    block sent there arrives (dK, dV accumulate as they travel round). Overlapped as the forward:
    backward only posts the exchange; `ArriveGrad`, the node where this step's block entered,
    waits for it after autograd has run this step's block-attention backward in between."""

    @staticmethod
    def forward(ctx, kv, received, comm, inflight):
        ctx.comm, ctx.inflight = comm, inflight
        return received.view_as(received)  # (2, B, nh, Tl, hs) from rank r−1

    @staticmethod
    def backward(ctx, grad):
        comm, inflight = ctx.comm, ctx.inflight
        n, r = comm.size, comm.rank
        inflight.grad = grad.contiguous()  # (2, B, nh, Tl, hs) to rank r−1
        inflight.handles = _start_exchange(inflight.grad, comm, (r - 1) % n, (r + 1) % n,
                                           "cp-backward")
        return None, None, None, None  # the block's gradient arrives in ArriveGrad.backward


class ArriveGrad(torch.autograd.Function):
    """Identity on the block a ring step holds. Its backward runs after every use of the block,
    RingPass's included (RingPass takes this node's output), so the gradient exchange RingPass
    posted is in flight while autograd runs this step's block-attention backward; here it is
    waited for and added."""

    @staticmethod
    def forward(ctx, kv, inflight):
        ctx.inflight = inflight
        return kv.view_as(kv)  # (2, B, nh, Tl, hs)

    @staticmethod
    def backward(ctx, grad):
        inflight = ctx.inflight
        if inflight.handles is None:  # the last step: nothing was sent from this block
            return grad, None
        arrived = _finish_exchange(inflight.handles)  # (2, B, nh, Tl, hs) from rank r+1
        inflight.handles = inflight.grad = None
        return grad + arrived, None


def _causal_relation(q_chunk: int, k_chunk: int) -> str:
    return "full" if k_chunk < q_chunk else ("diagonal" if k_chunk == q_chunk else "skip")


def ring_attention(q, k, v, comm, positions: list[torch.Tensor], causal: bool = True,
                   bias_fn=None, work: list | None = None, chunks: list[list[int]] | None = None):
    """Exact attention for this rank's queries over the whole sharded sequence.

    q, k, v (B, nh, Tl, hs): this rank's tokens (Tl = T/cp), at `positions[comm.rank]`;
    positions: every rank's token positions (they tell which keys a block holds, whatever the
    split). Causal masking goes chunk by chunk (2 chunks per rank, `layout_chunks`): chunk pairs
    above the diagonal are skipped. bias_fn(q_pos, k_pos, None) -> (nh, Tq, Tk) adds a score
    bias (the video denoiser's; None: all heads). `work`, when a list, receives the number of
    (chunk × chunk) score blocks computed at each ring step. chunks: every rank's two chunk indices
    (`all_chunks`), which decide the skipped pairs; None: read from `positions` (`chunks_of`).
    """
    n, me = comm.size, comm.rank
    if causal and chunks is None:
        chunks = chunks_of(positions)
    half = q.size(2) // 2
    q_parts = [q[:, :, :half], q[:, :, half:]] if causal else [q]  # 2 × (B, nh, Tl/2, hs)
    q_pos = positions[me]
    q_pos_parts = [q_pos[:half], q_pos[half:]] if causal else [q_pos]
    chunk_len = half
    partial = [None] * len(q_parts)
    unused = []  # received blocks no query of this rank attends to (causal, contiguous split)
    kv = torch.stack([k, v])  # (2, B, nh, Tl, hs): one message per ring step
    for step in range(n):
        inflight = _InFlight()
        kv = ArriveGrad.apply(kv, inflight) if n > 1 else kv  # (2, B, nh, Tl, hs)
        if step < n - 1:  # post the next block's transfer, then compute on this one
            pending = _start_exchange(kv.detach(), comm, (me + 1) % n, (me - 1) % n, "cp-forward")
        src = (me - step) % n  # whose block this rank holds now
        k_blk, v_blk, k_pos = kv[0], kv[1], positions[src]  # (B, nh, Tl, hs) ×2
        computed = 0
        if causal:
            for i, (qi, qp) in enumerate(zip(q_parts, q_pos_parts)):
                for j in range(2):
                    kp = k_pos[j * chunk_len:(j + 1) * chunk_len]
                    relation = _causal_relation(chunks[me][i], chunks[src][j])
                    if relation == "skip":
                        continue
                    mask = (kp[None, :] <= qp[:, None]) if relation == "diagonal" else None
                    bias = bias_fn(qp, kp, None) if bias_fn is not None else None
                    part = block_attention(qi, k_blk[:, :, j * chunk_len:(j + 1) * chunk_len],
                                           v_blk[:, :, j * chunk_len:(j + 1) * chunk_len], mask,
                                           bias)  # (B, nh, Tl/2, hs), (B, nh, Tl/2)
                    partial[i] = part if partial[i] is None else merge(*partial[i], *part)
                    computed += 1
        else:
            bias = bias_fn(q_pos, k_pos, None) if bias_fn is not None else None
            part = block_attention(q, k_blk, v_blk, None, bias)  # (B, nh, Tl, hs)
            partial[0] = part if partial[0] is None else merge(*partial[0], *part)
            computed += 4
        if work is not None:
            work.append(computed)
        if computed == 0:
            unused.append(kv)
        if step < n - 1:
            kv = RingPass.apply(kv, _finish_exchange(pending), comm,
                                inflight)  # (2, B, nh, Tl, hs)
    out = torch.cat([p[0] for p in partial], dim=2)  # (B, nh, Tl, hs)
    for block in unused:
        # Every rank must run every RingPass backward, in step with its neighbours, or the one
        # waiting for its dK, dV hangs: a zero-weight term keeps an unused block in the graph.
        out = out + 0.0 * block.sum()
    return out
