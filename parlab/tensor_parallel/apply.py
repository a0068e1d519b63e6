"""`apply_tp(model, mesh)`: Megatron tensor parallelism as one step of a composed plan.

Shoeybi et al., "Megatron-LM" (2019), §3, on the GPT of `parlab.models.mesh_gpt`: in every block
q, k, v and the MLP's first linear become column-parallel (f before them), both output
projections row-parallel (g after them); the slices are cut from the reference's weights. The
parallel parts are this chapter's (`parlab.tensor_parallel.layers`), the ones its own `tp` scheme
runs; the planner (`parlab.planner.compose`) only orders this call among the other dimensions.
"""

from __future__ import annotations

from parlab.core.mesh import Mesh
from parlab.models.gpt_moe import MoE
from parlab.models.mesh_gpt import MeshGPT
from parlab.tensor_parallel.layers import ParallelAttention, ParallelMLP


def apply_tp(model: MeshGPT, mesh: Mesh) -> MeshGPT:
    """Every block's attention and dense MLP over mesh["tp"] (this rank's nh/tp heads and 4C/tp
    hidden columns); nothing to do when the mesh has no tp dimension."""
    tp = mesh.degree("tp")
    if tp == 1:
        return model
    comm, rank = mesh["tp"], mesh.coord("tp")
    for block in model.blocks:
        attend = block.attn.attend  # keep a ring attention already set by apply_cp
        block.attn = ParallelAttention(block.attn, comm, rank, tp)
        block.attn.attend = attend
        if not isinstance(block.mlp, MoE):  # experts stay whole on every tp rank (apply_ep)
            block.mlp = ParallelMLP(block.mlp, comm, rank, tp)
    return model
