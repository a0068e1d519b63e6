"""`apply_dp(model, mesh, sync=...)`: data parallelism as one step of a composed plan.

Every rank that holds the same parameter slice after tensor and pipeline parallelism — the
dp × cp group (context-parallel ranks hold the same weights and see other tokens) — averages its
gradients after backward. `apply_dp` attaches one of this chapter's gradient reducers
(`parlab.data_parallel.reducer`, the building blocks its `GradSync` schemes run) to the model as
`model.grad_sync`, over that group, on the slice's own parameters (the stage's, tp-sliced;
expert weights sharded over ep sync apart, `parlab.expert_parallel.apply`):

    "flat"      one flat bucket after backward (`flat.all_reduce_flat`; the default, the bytes
                the planner's cost model counts);
    "naive"     one all-reduce per gradient tensor after backward;
    "bucketed"  buckets of `bucket_mb` MiB after backward (Li et al., VLDB 2020, §3.2.3);
    "overlap"   the same buckets launched from gradient hooks while backward runs (WFBP,
                Zhang et al., Poseidon, ATC 2017): only the last micro-batch's backward
                communicates — the step says which (`before_micro(last)`), or, in a pipeline,
                a gradient is ready at its m-th accumulation (m micro-batches per step).

or, with `compressor=` (chapter 08, `parlab.compression.compressed_reducers`), that chapter's
own reducer in place of these: the compressor named by its scheme — "topk", "randomk", "qsgd",
"signsgd" (each rank's message with error feedback, one all-gather: `compression.sync
.CompressedReducer`) or "powersgd" (two all-reduces of the rank-r factors:
`compression.powersgd.PowerSGDReducer`) — with `compressor_options` over the scheme's registered
defaults and the run's `seed` for the draws every rank shares. Its bytes are chapter 08's closed
form (`compression.cost`); it sends its own messages, so `sync` stays "flat" (no buckets).

Ledger phase "dp-grad-sync". The composed step calls `grad_sync.before_micro(last)` and
`grad_sync.after_backward()`, then steps its one optimizer over every parameter of the slice.
DeAR and the priority scheduler (`dear.DeARSync`, `priority`) are not offered: they are not a
reducer that ends with averaged gradients in `.grad` — their all-gathers (DeAR) or late
partitions (priority) complete inside the *next* forward, where `layerwise.LayerwiseUpdate`
waits for each bucket and steps that bucket's own optimizer before its first layer runs. The
composed step would have to hand its optimizer to the reducer, split per bucket, and run the
forward's pre-hooks inside a pipeline stage's executor; as it stands, its `optimizer.step()`
after `after_backward()` would update with gradients not yet gathered.
"""

from __future__ import annotations

from parlab.compression import compressed_reducers
from parlab.core.checks import Choice, Float
from parlab.core.mesh import Mesh
from parlab.data_parallel.reducer import REDUCERS, make_reducer
from parlab.expert_parallel.apply import expert_parameters
from parlab.models.mesh_gpt import MeshGPT

SYNCS = tuple(REDUCERS)
PHASE = "dp-grad-sync"


def synced_parameters(model: MeshGPT) -> list:
    """The parameters averaged over dp × cp: this rank's trainable ones but the ep-sharded experts,
    in `model.parameters()` order."""
    experts = {id(p) for p in expert_parameters(model)}
    return [p for p in model.parameters() if p.requires_grad and id(p) not in experts]


def apply_dp(model: MeshGPT, mesh: Mesh, sync: str = "flat", bucket_mb: float = 25.0,
             compressor: str | None = None, compressor_options: dict | None = None,
             seed: int = 0) -> MeshGPT:
    """Record the dp × cp group (`model.data_comm`, None when it is one rank) and attach the
    reducer `sync` over it — or chapter 08's reducer of `compressor` (None or "none": no
    compression) with `compressor_options` and `seed` — as `model.grad_sync` (None with one
    rank). Every value is checked first: a ValueError names it and the choices."""
    Choice(sync, SYNCS).check("sync", sync)
    Float(bucket_mb, min=0, unit="MiB").check("bucket_mb", bucket_mb)
    if compressor == "none":
        compressor = None
    if compressor is not None:
        compressed_reducers.check_compressor(compressor)
        if sync != "flat":
            raise ValueError(f"sync={sync!r} with compressor={compressor!r}: the compressor sends "
                             "its own messages (use sync='flat')")
        compressed_reducers.compressor_options(compressor, compressor_options)  # checked
    elif compressor_options:
        raise ValueError(f"compressor_options={compressor_options!r} without a compressor")
    model.data_comm = mesh.group_over(("dp", "cp"), "dp×cp")
    model.grad_sync = None
    if model.data_comm is not None and model.data_comm.size > 1:
        params = synced_parameters(model)
        if compressor is not None:
            model.grad_sync = compressed_reducers.compressed_reducer(
                compressor, model.data_comm, params, compressor_options, seed, phase=PHASE)
            return model
        parts = model.pipeline  # split_pp: its executor runs every micro-batch's backward
        backwards = parts.schedule.microbatches if parts is not None else 1
        model.grad_sync = make_reducer(sync, model.data_comm, params, bucket_mb, phase=PHASE,
                                       backwards=backwards)
    return model
