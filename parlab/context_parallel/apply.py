"""`apply_cp(model, mesh)`: context parallelism as one step of a composed plan.

Liu et al., "Ring Attention with Blockwise Transformers" (ICLR 2024), with the zigzag layout of
Llama 3 (Dubey et al. 2024, §3.3.2): this rank keeps the chunks r and 2cp−1−r of the sequence
(balanced causal work) and every attention layer reaches the other chunks by ring attention
(K/V round the ring forward, dK/dV back) — this chapter's `ring_attention`, plugged into the
GPT's one attention as its `attend`.
"""

from __future__ import annotations

from functools import partial

from parlab.context_parallel import ring_attention as ring
from parlab.core.mesh import Mesh
from parlab.models.mesh_gpt import MeshGPT


def apply_cp(model: MeshGPT, mesh: Mesh) -> MeshGPT:
    """This rank's zigzag tokens and ring attention over mesh["cp"]; nothing without cp."""
    cp = mesh.degree("cp")
    if cp == 1:
        return model
    T, rank = model.config.block_size, mesh.coord("cp")
    positions = ring.all_positions("zigzag", cp, T)  # every rank's token positions
    model.positions = positions[rank]  # (T/cp,)
    for block in model.blocks:
        block.attn.attend = partial(ring.ring_attention, comm=mesh["cp"], positions=positions,
                                    causal=True)
    return model
