"""`apply_cp(model, mesh)`: context parallelism — this rank's tokens, attention that reaches the rest.

Every method plugs an attention into the GPT's one attention (`CausalSelfAttention.attend`) and
gives the model this rank's token positions; the chapter's own `cp-*` schemes and the planner's
composed plans (`parlab.planner.compose`) both call `apply_cp`:

- ring (Liu et al., "Ring Attention with Blockwise Transformers", ICLR 2024): K/V blocks travel
  round the ring in forward, dK/dV back in backward (`ring_attention`); `recompute` keeps no
  remote block and fetches them again in backward (`ring_recompute`);
- Ulysses (Jacobs et al., "DeepSpeed Ulysses", 2023): all-to-all from sequence shards to head
  shards and back (`ulysses`);
- all-gather (Llama 3, Dubey et al. 2024, §3.3.2): gather K and V, attend locally, reduce-scatter
  dK, dV (`allgather_attention`).

Layouts (`ring_attention.LAYOUTS`): contiguous chunks, or zigzag — chunks r and 2cp−1−r, which
balances the causal work (Llama 3, Dubey et al. 2024, §3.3.2); the planner uses ring + zigzag.
"""

from __future__ import annotations

from functools import partial

from parlab.context_parallel import ring_attention as ring
from parlab.context_parallel.allgather_attention import allgather_attention
from parlab.context_parallel.ring_recompute import ring_attention_recompute
from parlab.context_parallel.ulysses import ulysses_attention
from parlab.core.mesh import Mesh
from parlab.models.gpt import GPT

METHODS = ("ring", "ulysses", "allgather")


def make_attention(method: str, comm, layout: str, seq_len: int, work: list | None = None,
                   recompute: bool = False):
    """attention(q, k, v) for this rank's tokens over `comm`, and every rank's token positions."""
    if method not in METHODS:
        raise ValueError(f"method={method!r} must be one of {METHODS}")
    positions = ring.all_positions(layout, comm.size, seq_len)
    chunks = ring.all_chunks(layout, comm.size)  # Python ints: nothing read from a tensor
    if method == "ring" and recompute:
        fn = partial(ring_attention_recompute, comm=comm, positions=positions, causal=True,
                     chunks=chunks)
    elif method == "ring":
        fn = partial(ring.ring_attention, comm=comm, positions=positions, causal=True, work=work,
                     chunks=chunks)
    elif method == "allgather":
        fn = partial(allgather_attention, comm=comm, positions=positions, causal=True,
                     chunks=chunks)
    else:
        fn = partial(ulysses_attention, comm=comm, positions=positions, causal=True)
    return fn, positions


def apply_cp(model: GPT, mesh: Mesh, method: str = "ring", layout: str = "zigzag",
             recompute: bool = False, work: list | None = None) -> GPT:
    """This rank's tokens (`model.positions`) and `method`'s attention in every block, over
    mesh["cp"]; nothing to do when the mesh has no cp dimension. `work` collects ring
    attention's per-step work, for the chapter's balance plots."""
    if mesh.degree("cp") == 1:
        return model
    attend, positions = make_attention(method, mesh["cp"], layout, model.config.block_size,
                                       work, recompute)
    model.positions = positions[mesh.coord("cp")]  # (T/cp,)
    for block in model.blocks:
        block.attn.attend = attend
    return model
