"""USP: Ulysses × ring — a 2-D context-parallel mesh, all-to-all inside, ring attention across.

Paper: Fang & Zhao, "USP: A Unified Sequence Parallelism Approach for Long Context Generative
AI" (2024, arXiv 2405.07719); the reference code is `LongContextAttention` in
feifeibear/long-context-attention (yunchang). Ours is written from the paper's description.

The idea. Ulysses (Jacobs et al. 2023) stops at cp ≤ the key/value heads and wants every pair of
its ranks well connected (an all-to-all); the ring (Liu et al., ICLR 2024) has no head limit and
talks to one neighbour, but sends K and V of every head round every hop. USP arranges the cp
ranks as a grid of u × r (u·r = cp): rank c of the group sits at Ulysses coordinate c mod u and
ring coordinate c // u, so a Ulysses group is u neighbouring ranks (one node, NVLink) and a ring
group takes one rank of each (the paper's "ulysses inner" placement). Per layer:

1. an all-to-all inside each Ulysses group (`ulysses.SeqToHeads` on q, k and v) trades tokens
   for heads: (B, nh, T/cp, hs) -> (B, nh/u, T/r, hs), the group's T/r tokens for nh/u heads;
2. ring attention over the ring group of r on those heads (`ring_attention.RingPass`: K/V blocks
   of (2, B, nh/u, T/r, hs) go round forward, dK/dV come back in backward), zig-zag over the ring;
3. an all-to-all back (`ulysses.HeadsToSeq`): (B, nh/u, T/r, hs) -> (B, nh, T/cp, hs).

Backward runs each pattern's adjoint. u = 1 is the ring, r = 1 is Ulysses.

The split (the paper's load balance, §"load balance" with its zig-zag ring): the sequence is cut
into 2r chunks; ring rank j's Ulysses group holds chunks j and 2r−1−j (the ring's zig-zag), and
that group's T/r tokens are split contiguously over its u ranks. After step 1 every rank of ring
coordinate j holds exactly the zig-zag ring's tokens of rank j, in order.

Bytes: `cost.usp_messages`; Ulysses' limit binds u only (`usp_problem`). In full:
docs/context_parallel.md.
"""

from __future__ import annotations

from functools import partial

from parlab.context_parallel import ring_attention as ring
from parlab.context_parallel.ulysses import HeadsToSeq, SeqToHeads
from parlab.core.mesh import Mesh
from parlab.models.gpt import GPT


def split_degrees(cp: int, ulysses: int) -> tuple[int, int]:
    """(u, r): the Ulysses and ring degrees of a cp group with Ulysses degree `ulysses`."""
    return ulysses, cp // ulysses


def usp_problem(cp: int, ulysses: int, n_head: int, n_kv_head: int, seq_len: int) -> str | None:
    """Why a u × r split of `cp` ranks does not work for this model (None when it does); the
    message names every factor. Ulysses splits the heads over its u ranks, so u must divide
    n_head and the key/value heads n_kv_head (u ≤ n_kv_head: Fang & Zhao 2024, §3, the limit USP
    lifts by putting the rest of cp in the ring); zig-zag over the ring needs 2r chunks and the
    group's T/r tokens split over u ranks."""
    if ulysses < 1 or cp % ulysses:
        return (f"cp={cp} is not divisible by ulysses={ulysses} (cp = ulysses u × ring r; "
                f"u must be one of {[d for d in range(1, cp + 1) if cp % d == 0]})")
    u, r = split_degrees(cp, ulysses)
    if n_head % u or n_kv_head % u:
        fits = [d for d in range(1, cp + 1) if cp % d == 0 and n_head % d == 0
                and n_kv_head % d == 0]
        return (f"ulysses={u} must divide n_head={n_head} and n_kv_head={n_kv_head} (Ulysses "
                f"splits the heads over its u ranks: u ≤ n_kv_head={n_kv_head}); cp={cp} = "
                f"ulysses {u} × ring {r}; ulysses that fit: {fits} (the rest of cp goes to the ring)")
    if seq_len % (2 * r) or (seq_len // r) % u:
        return (f"block_size={seq_len} (sequence length) must be divisible by 2·ring={2 * r} "
                f"(two zig-zag chunks per ring rank) and block_size/ring={seq_len // r} by "
                f"ulysses={u}; cp={cp} = ulysses {u} × ring {r}")
    return None


def usp_positions(u: int, r: int, seq_len: int) -> list:
    """Token positions of every rank of the cp group (index j·u + a: ring j, Ulysses a): the
    zig-zag ring's T/r tokens of ring rank j, cut contiguously into u pieces, piece a."""
    out = []
    for j in range(r):
        mine = ring.token_positions("zigzag", j, r, seq_len)  # (T/r,) chunks j and 2r−1−j
        out.extend(mine.chunk(u))  # u × (T/cp,)
    return out


def usp_attention(q, k, v, ulysses_comm, ring_comm, ring_positions, ring_chunks, work=None):
    """Exact causal attention for this rank's T/cp tokens; q, k, v (B, nh, T/cp, hs).

    ring_positions / ring_chunks: every ring rank's positions and chunks after the all-to-all
    (`ring_attention.all_positions("zigzag", r, T)`, `all_chunks("zigzag", r)`)."""
    if ulysses_comm.size > 1:
        q = SeqToHeads.apply(q, ulysses_comm)  # (B, nh, T/cp, hs) -> (B, nh/u, T/r, hs)
        k = SeqToHeads.apply(k, ulysses_comm)  # (B, nh/u, T/r, hs)
        v = SeqToHeads.apply(v, ulysses_comm)  # (B, nh/u, T/r, hs)
    out = ring.ring_attention(q, k, v, ring_comm, ring_positions, causal=True, work=work,
                              chunks=ring_chunks)  # (B, nh/u, T/r, hs); r = 1: local attention
    if ulysses_comm.size > 1:
        out = HeadsToSeq.apply(out, ulysses_comm)  # (B, nh/u, T/r, hs) -> (B, nh, T/cp, hs)
    return out


def apply_usp(model: GPT, mesh: Mesh, work: list | None = None) -> GPT:
    """USP attention in every block over mesh["ulysses"] (inner) × mesh["ring"] (outer), and this
    rank's tokens (`model.positions`); nothing to do when both have size 1."""
    u, r = mesh.degree("ulysses"), mesh.degree("ring")
    if u * r == 1:
        return model
    T = model.config.block_size
    attend = partial(usp_attention, ulysses_comm=mesh["ulysses"], ring_comm=mesh["ring"],
                     ring_positions=ring.all_positions("zigzag", r, T),
                     ring_chunks=ring.all_chunks("zigzag", r), work=work)
    model.positions = usp_positions(u, r, T)[mesh.coord("ring") * u + mesh.coord("ulysses")]
    for block in model.blocks:
        block.attn.attend = attend
    return model
