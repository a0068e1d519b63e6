"""`apply_zero(model, mesh, stage)`: ZeRO as one step of a composed plan.

Rajbhandari et al., "ZeRO" (SC 2020): stage 1, 2 or 3 over the dp × cp group, on the slice of
the model this rank holds after tensor and pipeline parallelism — this chapter's engine
(`parlab.zero.zero_engine.ZeroEngine`), the one its own `zero-*` schemes run.
"""

from __future__ import annotations

from parlab.core.mesh import Mesh
from parlab.models.mesh_gpt import MeshGPT
from parlab.zero.zero_engine import ZeroEngine


def apply_zero(model: MeshGPT, mesh: Mesh, stage: int, meter=None) -> MeshGPT:
    """Shard over dp × cp; `meter` (an ActivationMeter) is told which tensors are gathered
    parameters, not activations. Nothing to shard with one replica."""
    model.data_comm = mesh.group_over(("dp", "cp"), "dp×cp")
    if model.data_comm is None:
        return model
    hooks = {}
    if meter is not None:
        from parlab.core.memory import storage_key
        hooks = {"on_gather": lambda t: meter.excluded.add(storage_key(t)),
                 "on_release": lambda t: meter.excluded.discard(storage_key(t))}
    model.zero = ZeroEngine(model, model.data_comm, stage, **hooks)
    return model
