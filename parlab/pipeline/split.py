"""`split_pp(model, mesh, schedule, microbatches)`: pipeline parallelism as one step of a plan.

Keep only this rank's even share of the blocks (plus the embeddings on the first stage, the final
norm and tied head on the last) — this chapter's `stages` — and the checked schedule
(`parlab.pipeline.schedules`: GPipe, Huang et al. 2019; 1F1B, Narayanan et al. ICML 2021) that
the planner's step runs. The first and last stage of one pipeline both hold the tied embedding;
their two gradients are summed over `tie_comm` (Megatron's embedding group, Narayanan et al.
SC 2021, §2.2).
"""

from __future__ import annotations

from dataclasses import dataclass

from parlab.core.mesh import Mesh
from parlab.models.mesh_gpt import MeshGPT
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.schedules import make_schedule
from parlab.pipeline.validate import check


@dataclass
class PipelineParts:
    """What `split_pp` leaves: this rank's stage, the schedule, the comms a step needs."""

    stage_id: int
    counts: list  # layers per stage
    stages: dict  # {stage id: Stage}
    schedule: object
    comm_f: object  # activations forward (mesh["pp"])
    comm_b: object  # gradients back: their own FIFO
    tie_comm: object  # first and last stage of one pipeline: the tied embedding's two copies

    @property
    def last(self) -> bool:
        return self.stage_id == len(self.counts) - 1


def split_pp(model: MeshGPT, mesh: Mesh, schedule: str = "1f1b", microbatches: int = 1) -> MeshGPT:
    """This rank's stage over mesh["pp"] and its schedule; nothing without pp."""
    pp = mesh.degree("pp")
    if pp == 1:
        return model
    stage = mesh.coord("pp")
    counts = stages_mod.even_partition(len(model.blocks), pp)
    tie = mesh.groups_by(lambda r, c: tuple(v for n, v in c.items() if n != "pp")
                         if c["pp"] in (0, pp - 1) else ("alone", r))  # first + last stage
    tie_comm = mesh.world.split(tie, "embed-tie")
    comm_b = mesh.world.split(mesh.groups("pp"), "pp-bwd")
    stages = stages_mod.build_stages(model, [stage], counts)
    model.pipeline = PipelineParts(stage, counts, stages,
                                   check(make_schedule(schedule, pp, microbatches)),
                                   mesh["pp"], comm_b, tie_comm)
    return model
