"""`apply_dp(model, mesh, sync=...)`: data parallelism as one step of a composed plan.

Li et al., "PyTorch Distributed" (VLDB 2020): every rank holding the same parameter slice after
tensor and pipeline parallelism — the dp × cp group — averages its gradients after backward.
`apply_dp` attaches one of this chapter's gradient reducers (`parlab.data_parallel.reducers`,
chosen by name from `ALL_REDUCERS`: "flat", "naive", "bucketed", "overlap" — WFBP —, "dear",
"priority" — P3) over that group as the model's "dp" dimension (`DataParallel`), on the slice's
own parameters (what another dimension syncs apart, ep's experts, left out). Chapter 01's own
schemes attach theirs the same way, over the world (`world_reducer`); chapter 08's compressors
register themselves here (`register_compression`) and replace the reducer with `compressor=`.
"dear" and "priority" own the update: the step hands them its optimizer (`own_update`).

Ledger phase "dp-grad-sync" (chapter 01: the run's label). Each reducer, the refusals (a pipeline
or ep's experts beside an owner of the update, a compressor with buckets) and why are in
docs/composition.md.
"""

from __future__ import annotations

from parlab.core.checks import Choice, Float, Int
from parlab.core.memory import tensor_bytes
from parlab.core.mesh import Mesh
from parlab.data_parallel.dear import DeARReducer
from parlab.data_parallel.priority import PriorityReducer
from parlab.data_parallel.reducers import REDUCERS, GradientReducer, make_reducer
from parlab.engine.dimension import Dimension, add_dimension, dimension, dimensions
from parlab.models.gpt import GPT

# every reducer apply_dp attaches; those that own the update (`owns_update`: it ends in the next
# forward) are handed the step's optimizer by the caller
ALL_REDUCERS = {**REDUCERS, "dear": DeARReducer, "priority": PriorityReducer}
SYNCS = tuple(ALL_REDUCERS)
PHASE = "dp-grad-sync"


class DataParallel(Dimension):
    """Data parallelism as the step sees it: its reducer told which micro-batch is the last, then
    averaging over dp × cp after backward; a reducer that owns the update (DeAR, P3) is handed
    the optimizer (`own_update`) and flushed after the last step (`flush`)."""

    name = "dp"

    def __init__(self, reducer, after_backward_span: str | None = None):
        self.reducer = reducer
        self.after_backward_span = after_backward_span  # "compress": a compressor's work
        self.owns_update = reducer.owns_update
        self.during_backward = reducer.during_backward  # overlapped: sends inside backward

    def before_micro(self, last: bool) -> None:
        self.reducer.before_micro(last=last)

    def after_backward(self) -> None:
        self.reducer.after_backward()  # every dense gradient averaged over dp × cp

    def own_update(self, ctx, model, optimizer, span):
        return self.reducer.own_update(ctx, model, optimizer, span)

    def flush(self) -> None:
        self.reducer.flush()

    def memory(self, memory: dict, optimizer) -> dict:
        buffers = self.reducer.buffers()
        if buffers:  # a bucketed reducer's flat buffers
            memory["comm_buffers"] = tensor_bytes(buffers)
        return memory


# chapter 08 extends apply_dp with its compressed reducers by registering them here
# (`parlab.compression.compressed_reducers`): this chapter never imports a later one
COMPRESSION: dict = {}


def register_compression(check, options, build) -> None:
    """A later chapter's compressors: `check(name)` refuses an unknown one, `options(name,
    given)` checks and completes its options, `build(name, comm, params, options, seed,
    phase=)` makes its reducer (chapter 08's `compressed_reducers`)."""
    COMPRESSION.update(check=check, options=options, build=build)


def _compression():
    if not COMPRESSION:
        raise ValueError("compressor=: no compressors are registered; import "
                         "parlab.compression.compressed_reducers (chapter 08) first")
    return COMPRESSION


def synced_parameters(model: GPT) -> list:
    """The parameters averaged over dp × cp: this rank's trainable ones but those a dimension
    syncs apart (the ep-sharded experts), in `model.parameters()` order."""
    apart = {id(p) for d in dimensions(model) for p in d.syncs_apart()}
    return [p for p in model.parameters() if p.requires_grad and id(p) not in apart]


def apply_dp(model: GPT, mesh: Mesh, sync: str = "flat", bucket_mb: float = 25.0,
             compressor: str | None = None, compressor_options: dict | None = None,
             seed: int = 0, partition_kb: float = 32.0, credit: int = 1, *, algo: str = "gloo",
             reduce_fp32: bool = False, phase: str | None = PHASE,
             reuse_world: bool = False) -> GPT:
    """Record the dp × cp group (`model.data_comm`, None when it is one rank) and attach the
    reducer `sync` over it — or chapter 08's reducer of `compressor` (None or "none": no
    compression) with `compressor_options` and `seed` — as the model's "dp" dimension (none with one
    rank); `partition_kb` and `credit`: "priority"'s, `reduce_fp32`: "naive"'s and "bucketed"'s,
    `algo`: the collectives' ("gloo", or chapter 00's "ring", ...). "dear" and "priority" own the
    update: the caller must hand it the optimizer (the dimension's `own_update`) and call its
    `flush()` after the last step. `phase`: the ledger phase (None: the run's current label);
    `reuse_world`: the world's own Comm when dp × cp is the world, and a reducer even on one rank
    (chapter 01's schemes: `world_reducer`). Every value is checked first: a ValueError names it
    and the choices."""
    Choice(sync, SYNCS).check("sync", sync)
    Float(bucket_mb, min=0, unit="MiB").check("bucket_mb", bucket_mb)
    Float(partition_kb, min=4 / 1024, unit="KiB: >= one float32").check("partition_kb",
                                                                        partition_kb)
    Int(credit, min=1).check("credit", credit)
    if compressor == "none":
        compressor = None
    if compressor is not None:
        _compression()["check"](compressor)
        if sync != "flat":
            raise ValueError(f"sync={sync!r} with compressor={compressor!r}: the compressor sends "
                             "its own messages (use sync='flat')")
        _compression()["options"](compressor, compressor_options)  # checked
    elif compressor_options:
        raise ValueError(f"compressor_options={compressor_options!r} without a compressor")
    owns_update = ALL_REDUCERS[sync].owns_update
    parts = getattr(model, "pipeline", None)  # split_pp: its executor runs every backward
    if owns_update and parts is not None:
        raise ValueError(f"sync={sync!r} with a pipeline stage (pp > 1): its executor runs the "
                         "stage's forwards and the tied embedding is summed from gradients "
                         "averaged right after backward, but this reducer's communication ends "
                         "in the next forward (use sync='overlap' or pp=1)")
    if owns_update and any(d.syncs_apart() for d in dimensions(model)):
        raise ValueError(f"sync={sync!r} with expert weights sharded over ep: they sync and step "
                         "apart, after the dense gradients this reducer leaves in flight (use "
                         "sync='flat')")
    world = reuse_world and mesh.degree("dp") * mesh.degree("cp") == mesh.world.size
    model.data_comm = mesh.world if world else mesh.group_over(("dp", "cp"), "dp×cp")
    if model.data_comm is None or (model.data_comm.size == 1 and not world):
        return model
    params = synced_parameters(model)
    if compressor is not None:
        reducer = _compression()["build"](compressor, model.data_comm, params,
                                          compressor_options, seed, phase=phase)
    else:  # an owner of the update: the step hands it its optimizer (`own_update`)
        backwards = parts.schedule.microbatches if parts is not None else 1
        reducer = make_reducer(sync, model.data_comm, params, bucket_mb, phase=phase, algo=algo,
                               backwards=backwards, reducers=ALL_REDUCERS,
                               partition_kb=partition_kb, credit=credit,
                               reduce_fp32=reduce_fp32)
    # a compressor encodes and decodes after backward: compute, priced as chapter 08's loop does
    return add_dimension(model, DataParallel(reducer, "compress" if compressor else None))


def world_reducer(model, comm, sync: str, **options) -> GradientReducer:
    """Chapter 01's reducer `sync` for its own loop: `apply_dp` over all of `comm` (a mesh of one
    dimension, its records under the world's name and the run's phase label); `options` as
    apply_dp's."""
    apply_dp(model, Mesh(comm, [("dp", comm.size)]), sync, phase=None, reuse_world=True,
             **options)
    return dimension(model, "dp").reducer
