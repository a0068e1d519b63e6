"""`apply_ep(model, mesh, ep)`: expert parallelism as one step of a composed plan.

GShard (Lepikhin et al. 2020) borrowing its ranks from dp: dp coordinate d is ep rank d mod ep of
ep group ⌊d/ep⌋ (DeepSpeed-MoE's layout, Rajbhandari et al. ICML 2022). Every MoE keeps E/ep
experts and dispatches rows by all-to-all within its ep group (this chapter's
`parlab.expert_parallel.layer`); the routing counts are all-gathered over the dp group, so
capacity and dropping follow the single process's global rule.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch.nn as nn

from parlab.core.mesh import Mesh
from parlab.data_parallel.flat_all_reduce import all_reduce_flat
from parlab.engine.dimension import Dimension, add_dimension
from parlab.expert_parallel.layer import METHODS, ShardedMoE, assemble_state
from parlab.models.gpt import GPT
from parlab.models.gpt_moe import MoE


class ExpertParallel(Dimension):
    """The experts sharded over ep, as the step sees them: after the dense gradients' sync, each
    expert's gradient summed over the ranks that hold the same experts (`expert_comm`, None when
    no other rank does) and divided by the dp × cp ranks whose token means it saw."""

    name = "ep"
    axes = ("dp", "ep")  # ep borrows its ranks from dp: the holders' dp coordinate is their ep one
    weights = (".mlp.w_in", ".mlp.w_out")  # the expert weights' names (`expert_parameters`)

    @staticmethod
    def assemble(pieces: list) -> dict:
        """The experts concatenated over the ep ranks (in ep order), the rest as they are."""
        names = [n for n in pieces[0].state if n.endswith(ExpertParallel.weights)]
        return assemble_state([p.state for p in pieces], names)

    def __init__(self, model, expert_comm, replicas: int):
        self.model, self.expert_comm, self.replicas = model, expert_comm, replicas

    def syncs_apart(self) -> list:
        return expert_parameters(self.model)

    def after_sync(self) -> None:
        sharded = expert_parameters(self.model)
        if not sharded:  # ep = 1: the experts are whole here, dp averaged them with the rest
            return
        if self.expert_comm is not None:
            all_reduce_flat(self.expert_comm, sharded, "sum", "expert-grad-sync")
        for p in sharded:
            p.grad.div_(self.replicas)


def apply_ep(model: GPT, mesh: Mesh, ep: int, method: str = "all_to_all") -> GPT:
    """Every MoE layer over ep ⊂ dp, dispatching by `method` ("all_to_all", or "all_gather":
    `parlab.expert_parallel.layer.METHODS`). Nothing to do without MoE layers or with one dp
    rank. The tp ranks hold the experts whole (the same routing, the same rows)."""
    if method not in METHODS:
        raise ValueError(f"method={method!r} must be one of {sorted(METHODS)}")
    moes = [b for b in model.blocks if isinstance(b.mlp, MoE)]
    dp = mesh.degree("dp")
    if not moes or dp == 1:
        return model
    data = mesh.group_over(("dp",), "moe-counts")  # every rank whose tokens share the capacity
    expert_comm = None

    def rest(c):
        return tuple(v for n, v in c.items() if n != "dp")

    def replica_key(c):  # the same experts: the same d mod ep, any dp group, any cp shard
        return tuple(v for n, v in c.items() if n not in ("dp", "cp")) + (c["dp"] % ep,)

    if ep > 1:  # ep groups: dp coordinates ⌊d/ep⌋·ep ... ; replicas: the same d mod ep
        ep_comm = mesh.world.split(mesh.groups_by(lambda r, c: rest(c) + (c["dp"] // ep,)), "ep")
        if dp * mesh.degree("cp") > ep:
            expert_comm = mesh.world.split(mesh.groups_by(lambda r, c: replica_key(c)),
                                           "expert-replicas")
    else:  # experts whole here: only the counts travel
        ep_comm = SimpleNamespace(size=1, rank=0, ranks=[mesh.world.global_rank(mesh.world.rank)])
    for block in moes:
        layer = (METHODS[method] if ep > 1 else ShardedMoE)(block.mlp, data, ep_comm)
        layer.group = [data.ranks.index(r) for r in ep_comm.ranks]  # ep peers' rows in the counts
        block.mlp = layer
    # every rank's loss is a mean over its tokens: ÷ the dp × cp ranks
    return add_dimension(model, ExpertParallel(model, expert_comm, dp * mesh.degree("cp")))


def expert_parameters(model: nn.Module) -> list:
    """The expert weights sharded over ep (apply_ep with ep > 1), whose gradients sum over ep."""
    return [p for b in model.blocks if isinstance(getattr(b, "mlp", None), tuple(METHODS.values()))
            for p in (b.mlp.w_in, b.mlp.w_out)]
