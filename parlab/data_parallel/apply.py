"""`apply_dp(model, mesh)`: data parallelism as one step of a composed plan.

Every rank that holds the same parameter slice after tensor and pipeline parallelism — the
dp × cp group (context-parallel ranks hold the same weights and see other tokens) — averages its
gradients after backward. The composed step syncs them as one flat bucket
(`parlab.data_parallel.flat.all_reduce_flat`, phase "dp-grad-sync"); a simplification of
this chapter's `GradSync` strategies, which bucket by size and overlap with backward (WFBP), named
here because the planner's step does not overlap.
"""

from __future__ import annotations

from parlab.core.mesh import Mesh
from parlab.models.mesh_gpt import MeshGPT


def apply_dp(model: MeshGPT, mesh: Mesh) -> MeshGPT:
    """Record the dp × cp group whose gradients are averaged (None when it is one rank)."""
    model.data_comm = mesh.group_over(("dp", "cp"), "dp×cp")
    return model
