"""`split_pp(model, mesh, schedule, microbatches)`: pipeline parallelism as one step of a plan.

Cut the model's layers into stages (even by default, or the `counts` a chapter chose: balanced
by time, LAMP's by memory, given), keep only this rank's stages of them — the chapter's `Stage`s,
the embeddings on the first, the final norm and the tied head on the last — and the checked
schedule (`parlab.pipeline.schedules`, data: GPipe, Huang et al. 2019; 1F1B, Narayanan et al.
ICML 2021; interleaved, Narayanan et al. SC 2021; ZB, DualPipe, ...) the step runs. Stages are
placed on the pipeline ranks as a loop (rank r holds stages r, p + r, ... — Megatron's interleaved
chunks; one stage per rank when chunks = 1) or mirrored (rank r holds stages r and p − 1 − r, one
of each direction: DualPipe, DeepSeek-V3 report 2024, §3.2.1). The ranks holding the first and
the last stage of one pipeline both hold the tied embedding; their two gradients are summed over
`tie_comm` (Megatron's embedding group, Narayanan et al. SC 2021, §2.2); where one rank holds
both (mirrored), the two uses accumulate into one tensor and the group is that rank alone.

Both chapter 04's schemes and the planner's `nd` cut their models here; both build their
`PipelineExecutor` from the parts (`PipelineParts.executor`).
"""

from __future__ import annotations

from dataclasses import dataclass

from parlab.core.mesh import Mesh
from parlab.engine.dimension import Dimension, add_dimension, dimensions
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.actions import Schedule
from parlab.pipeline.executor import PipelineExecutor
from parlab.pipeline.schedules import make_schedule
from parlab.pipeline.validate import check

PLACEMENTS = ("loop", "mirror", "v")


@dataclass
class PipelineParts:
    """What `split_pp` leaves: this rank's stages, the schedule, the comms a step needs."""

    stage_ids: list  # this rank's stages, in order
    counts: list  # layers per stage
    stages: dict  # {stage id: Stage}
    schedule: Schedule
    comm_f: object  # activations forward (mesh["pp"])
    comm_b: object  # gradients back: their own FIFO
    tie_comm: object  # first and last stage of one pipeline: the tied embedding's two copies

    @property
    def stage_id(self) -> int:
        return self.stage_ids[0]

    @property
    def last(self) -> bool:
        """Whether this rank holds the last stage (the one that computes the loss)."""
        return len(self.counts) - 1 in self.stage_ids

    def executor(self, ctx, pp_rank: int, boundary_shape, meter, strategy=None) -> PipelineExecutor:
        """The executor that runs the schedule on these stages over `comm_f` / `comm_b`."""
        return PipelineExecutor(ctx, self.schedule, pp_rank, self.stages, self.comm_f,
                                self.comm_b, boundary_shape, meter, strategy)


class EmbeddingTie(Dimension):
    """The pipeline as the step sees it: the tied embedding's two gradients (first and last
    stage) summed over `tie_comm` after backward — before the data-parallel average, or after it
    when that average already started inside backward (Σ of the averages = the average of the
    sums); none when `tie_comm` is None (an untied head, or one rank holding both). Ledger phase
    "embed-tie". The parent unites the stages' parameters (the tied copies are equal)."""

    name = "pp"
    axes = ("pp",)

    def __init__(self, model, tie_comm):
        self.model, self.tie_comm = model, tie_comm

    @staticmethod
    def assemble(pieces: list) -> dict:
        return {name: t for piece in pieces for name, t in piece.state.items()}

    def _sum(self) -> None:
        if self.tie_comm is None:
            return
        self.tie_comm.all_reduce(self.model.wte.weight.grad, op="sum",
                                 phase="embed-tie")  # (vocab, C) first + last stage

    def _late(self) -> bool:
        return any(d.during_backward for d in dimensions(self.model))

    def after_backward(self) -> None:
        if not self._late():
            self._sum()

    def after_sync(self) -> None:
        if self._late():
            self._sum()


def placed_stages(placement: str, pp: int, chunks: int, pp_rank: int) -> list[int]:
    """The stages pipeline rank `pp_rank` holds: a loop (stage c·p + r for chunk c), mirrored
    (stages r and p − 1 − r) or a V (stages r and 2p − 1 − r: ZB-V, `parlab.pipeline.zbv`)."""
    if placement == "mirror":
        return sorted({pp_rank, pp - 1 - pp_rank})
    if placement == "v":
        return [pp_rank, 2 * pp - 1 - pp_rank]  # chunk 0 (down), chunk 1 (back up)
    return [c * pp + pp_rank for c in range(chunks)]


def split_pp(model, mesh: Mesh, schedule: str | Schedule = "1f1b", microbatches: int = 1, *,
             chunks: int = 1, counts: list[int] | None = None, placement: str = "loop",
             staged=None):
    """This rank's stages over mesh["pp"] and their schedule, as `model.pipeline` (PipelineParts).

    `schedule`: a name of `parlab.pipeline.schedules` (built for pp, microbatches, chunks) or a
    Schedule; `counts`: layers per stage (default: even over the model's blocks); `placement`:
    "loop", "mirror" (DualPipe's two stages per rank) or "v" (ZB-V's, chunks = 2); `staged`: the
    model's `StagedModel` (how its stages are built; default the layer-list models'). Collective
    over the mesh's world: every rank calls it with the same arguments. A mesh of pp = 1 gives one
    rank all the stages."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r} must be one of {PLACEMENTS}")
    pp, pp_rank = mesh.degree("pp"), mesh.coord("pp")
    n_stages = pp if placement == "mirror" else pp * chunks
    if counts is None:
        if not hasattr(model, "blocks"):
            raise ValueError(f"split_pp: {type(model).__name__} has no `blocks`; give counts= "
                             "(layers per stage)")
        counts = stages_mod.even_partition(len(model.blocks), n_stages)
    if len(counts) != n_stages:
        raise ValueError(f"counts={list(counts)} gives {len(counts)} stages; pp={pp} with "
                         f"placement={placement!r}, chunks={chunks} needs {n_stages}")
    if isinstance(schedule, str):
        schedule = make_schedule(schedule, pp, microbatches, chunks)
    check(schedule)
    holders = {r: placed_stages(placement, pp, chunks, r) for r in range(pp)}
    first = {r for r, ids in holders.items() if 0 in ids}
    last = {r for r, ids in holders.items() if n_stages - 1 in ids}
    ends = set() if first & last else first | last  # one rank holding both: no group
    tie = mesh.groups_by(lambda r, c: tuple(v for n, v in c.items() if n != "pp")
                         if c.get("pp", 0) in ends else ("alone", r))  # first + last stage
    tie_comm = mesh.world.split(tie, "embed-tie")
    comm_b = mesh.world.split(mesh.groups("pp") if "pp" in mesh.names else
                              [[r] for r in range(mesh.world.size)], "pp-bwd")
    stage_ids = holders[pp_rank]
    build = staged.build_stages if staged is not None else stages_mod.build_stages
    stages = build(model, stage_ids, list(counts))
    comm_f = mesh["pp"] if "pp" in mesh.names else comm_b
    model.pipeline = PipelineParts(stage_ids, list(counts), stages, schedule, comm_f, comm_b,
                                   tie_comm)
    tied = hasattr(model, "wte") and getattr(getattr(model, "config", None), "tie_head", False)
    summed = tie_comm if tied and tie_comm.size > 1 else None  # untied head: nothing to sum
    return add_dimension(model, EmbeddingTie(model, summed))
