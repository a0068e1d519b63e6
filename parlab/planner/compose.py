"""Composing every dimension on one mesh: the planner orders the chapters' `apply_*`, nothing more.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021, §2-3: PTD-P) stack pipeline, tensor and data parallelism on one grid of
ranks; context parallelism (Liu et al., ring attention, ICLR 2024; Llama 3, Dubey et al. 2024,
§3.3.2) cuts the sequence as a fourth dimension. The style is torchtitan's `parallelize_llama`:
one reference model, then each chapter's own function, applied in a fixed order, each taking the
mesh and returning the model:

    model = gpt_on_mesh(build_model(cfg))     # parlab.models.gpt: the reference GPT itself
    model = apply_tp(model, mesh)             # parlab.tensor_parallel.apply   (ch. 03)
    model = apply_cp(model, mesh)             # parlab.context_parallel.apply  (ch. 06)
    model = apply_ep(model, mesh, ep)         # parlab.expert_parallel.apply   (ch. 07)
    model = split_pp(model, mesh, ...)        # parlab.pipeline.split          (ch. 04; pp > 1)
    model = apply_dp(model, mesh, sync)       # parlab.data_parallel.apply     (ch. 01: a reducer;
                                              #   ch. 08's with compressor=)
         or apply_zero(model, mesh, stage)    # parlab.zero.apply              (ch. 02)

Nothing is global: every function reads the degrees from the mesh it is given (`plan.mesh_dims`
order pp, dp, cp, tp; dimensions of size 1 are left out, `Mesh.degree` says 1 for them).

The loss bookkeeping that makes every plan exact: each rank's loss is the mean cross-entropy of
its own tokens (B/dp rows × T/cp positions, equal on every rank), so the global mean loss is the
average over the dp × cp ranks that hold the same parameter slice, and so is the global gradient:
one all-reduce *average* over that dp × cp group (or ZeRO's reduce-scatter average over it).
Tensor-parallel ranks (no sequence parallelism) compute the same loss and the same gradients of
the replicated parameters: nothing to sync over tp. Pipeline stages hold disjoint layers, except
the tied embedding of the first and last stage, whose two gradients are summed (Megatron's
embedding group).
"""

from __future__ import annotations

from parlab.context_parallel.apply import apply_cp
from parlab.core.mesh import Mesh
from parlab.data_parallel.apply import apply_dp
from parlab.expert_parallel.apply import apply_ep, expert_parameters
from parlab.models.gpt import GPT, gpt_on_mesh
from parlab.pipeline.split import split_pp
from parlab.tensor_parallel.apply import apply_tp
from parlab.zero.apply import apply_zero

__all__ = ["apply_cp", "apply_dp", "apply_ep", "apply_tp", "apply_zero", "build_mesh",
           "expert_parameters", "gpt_on_mesh", "parallelize", "split_pp"]


def build_mesh(comm, plan) -> Mesh:
    """The plan's mesh (pp, dp, cp, tp; tp innermost), dimensions of size 1 left out."""
    return Mesh(comm, [(name, size) for name, size in plan.mesh_dims() if size > 1])


def parallelize(model, mesh: Mesh, plan, meter=None, seed: int = 0) -> GPT:
    """The reference `model` parallelised along every dimension of `plan`, in the order above;
    `meter` (an ActivationMeter) is handed to ZeRO so gathered parameters are not counted as
    activations; `seed` (the run's) to a compressor's shared draws (`Plan.dp_compressor`)."""
    model = gpt_on_mesh(model)
    model = apply_tp(model, mesh)
    model = apply_cp(model, mesh)
    model = apply_ep(model, mesh, plan.ep)
    if plan.pp > 1:
        model = split_pp(model, mesh, plan.schedule, plan.microbatches)
    if plan.zero:
        return apply_zero(model, mesh, plan.zero, meter)
    return apply_dp(model, mesh, plan.dp_sync, plan.dp_bucket_mb, plan.dp_compressor,
                    plan.compressor_options(), seed, plan.dp_partition_kb, plan.dp_credit)
