"""The MoE layer with its experts sharded over an ep group (GShard, Lepikhin et al. 2020).

`parlab.expert_parallel.apply.apply_ep` swaps every `parlab.models.gpt_moe.MoE` of a
reference model for a layer that keeps only the experts [j·E/ep, (j+1)·E/ep) of ep rank j (the
same router, the same shared expert, slices of the same weights) and changes only how rows reach
them:

* `AllToAllMoE` (`ep`): the world's counts are all-gathered first (W·k·E integers), so every rank
  knows the routing plan — which of its assignments fit their expert's capacity (the global rule
  of the single process) and how many rows it sends to and receives from each ep peer. Then
  Dispatch, the local experts, Combine (`parlab.expert_parallel.ops`).
* `AllGatherMoE` (`ep-allgather`): every token of the ep group goes to every rank, each rank
  applies its experts to the tokens routed to them, and a reduce-scatter sums the experts' parts
  back — ep times the bytes of a perfectly balanced all-to-all, whatever the routing.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from parlab.expert_parallel.ops import Combine, Dispatch, GatherTokens, ScatterOutputs, gather_counts
from parlab.models.gpt_moe import MoE, run_experts
from parlab.models.moe_routing import EvenPlan, RoutingPlan


class ShardedMoE(MoE):
    """An MoE holding experts [first, first + E/ep) of `reference`; the counts are all-gathered
    over the world (capacity is global), tokens move within the ep group."""

    def __init__(self, reference: MoE, world, ep_comm):
        nn.Module.__init__(self)
        cfg = reference.cfg
        self.cfg, self.world, self.ep_comm = cfg, world, ep_comm
        self.per_rank = cfg.n_experts // ep_comm.size
        self.first = ep_comm.rank * self.per_rank
        last = self.first + self.per_rank
        self.router = reference.router
        self.w_in = nn.Parameter(reference.w_in.detach()[self.first:last].clone())  # (E/ep, C, H)
        self.w_out = nn.Parameter(reference.w_out.detach()[self.first:last].clone())  # (E/ep, H, C)
        self.shared = reference.shared
        self.aux, self.log = None, []
        self.group = ep_comm.ranks  # world ranks of the ep group, in ep order

    def exchange_counts(self, counts):
        return gather_counts(self.world, counts), self.world.rank  # (W, k, E)


class AllToAllMoE(ShardedMoE):
    def expert_rows(self, rows, row_expert, plan: RoutingPlan):
        """rows (A, C) sorted by expert -> Dispatch -> local experts -> Combine -> (A, C)."""
        send, recv, received_expert = plan.splits(self.group, self.first, self.per_rank)
        received = Dispatch.apply(rows, send, recv, self.ep_comm)  # (R, C) grouped by source
        out = run_experts(received, received_expert, self.w_in, self.w_out, self.first,
                          sizes=plan.expert_sizes_from(self.group, self.first, self.per_rank)
                          )  # (R, C)
        return Combine.apply(out, recv, send, self.ep_comm)  # (A, C) in dispatch order


class AllGatherMoE(ShardedMoE):
    def mix(self, flat, experts, gates, keep, plan: RoutingPlan):
        """Gather the group's tokens and gates, run the local experts on the ones routed to
        them, reduce-scatter the weighted outputs: flat (N/ep, C) -> (N/ep, C)."""
        C, k = flat.size(1), gates.size(1)
        everything = GatherTokens.apply(torch.cat([flat, gates], 1), self.ep_comm)  # (N, C + k)
        tokens, all_gates = everything.split([C, k], 1)  # (N, C), (N, k)
        ids = torch.where(keep, experts, -1)  # (N/ep, k) dropped slots: -1
        all_ids = self.ep_comm.all_gather(ids, dim=0, phase="routing")  # (N, k)
        if isinstance(plan, EvenPlan):  # the plan knows, without reading a value (shapes-only)
            token, slot, expert = plan.group_assignments(self.group, self.first, self.per_rank)
            sizes = plan.expert_sizes_from(self.group, self.first, self.per_rank)
        else:
            mine = (all_ids >= self.first) & (all_ids < self.first + self.per_rank)  # (N, k)
            token, slot = mine.nonzero(as_tuple=True)  # (A,), (A,) this rank's experts' work
            expert, sizes = all_ids[token, slot], None  # (A,)
        out = run_experts(tokens[token], expert, self.w_in, self.w_out, self.first,
                          sizes=sizes)  # (A, C)
        weighted = out * all_gates[token, slot].unsqueeze(1)  # (A, C)
        partial = tokens.new_zeros(tokens.shape).index_add(0, token, weighted)  # (N, C)
        return ScatterOutputs.apply(partial, self.ep_comm)  # (N/ep, C) summed over experts


METHODS = {"all_to_all": AllToAllMoE, "all_gather": AllGatherMoE}


def expert_parameter_names(model: nn.Module) -> list[str]:
    """Names of the expert weights (sharded over ep); every other parameter is replicated."""
    return [f"{name}.{w}" for name, m in model.named_modules() if isinstance(m, MoE)
            for w in ("w_in", "w_out")]


def assemble_state(states: list[dict], expert_names: list[str]) -> dict:
    """The full state from one rank per ep coordinate (in ep order): experts concatenated."""
    full = dict(states[0])
    for name in expert_names:
        full[name] = torch.cat([s[name] for s in states])  # (E, ...) from ep × (E/ep, ...)
    return full
