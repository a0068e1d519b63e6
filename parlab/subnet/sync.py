"""Owner-group gradient averaging and the parameter refresh: the communication of SDP.

Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism" (2025):
a parameter's gradient is averaged among the k ranks that own it, never over all N. This file
uses one process group per owner set (at most N): the gradients of the units owned by exactly S
are laid end to end and all-reduced inside S, so only owned parameters move and nothing is
allocated for the rest; `emulate.py` computes the same average as a masked sum ÷ owner count, and
the tests hold the two equal. Under backward masking `SubnetSync.refresh` all-gathers every
updated unit to every rank. Why not the masked all-reduce: docs/subnet.md, `parlab.subnet.sync`.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from parlab.core.comm import Comm
from parlab.core.memory import ActivationMeter, model_memory
from parlab.engine.loop import Strategy, make_optimizer
from parlab.subnet.masking import Subnet
from parlab.subnet.ownership import Ownership


def owner_comms(comm: Comm, owner_sets: list[tuple]) -> dict[tuple, Comm]:
    """{owner set: Comm over it} for the sets of more than one rank that hold this rank.

    Collective: every rank calls it with the same sets (torch.distributed.new_group must be called
    by all ranks in the same order); the set of all ranks is `comm` itself.
    """
    comms = {}
    for owners in owner_sets:
        if len(owners) == 1:
            continue  # one owner: its gradient is already the owners' average
        if len(owners) == comm.size:
            comms[owners] = comm
            continue
        group = dist.new_group([comm.global_rank(r) for r in owners], use_local_synchronization=False)
        if comm.rank in owners:
            comms[owners] = Comm(group, ledger=comm.ledger, timeline=comm.timeline, link=comm.link,
                                 name="owners" + "-".join(map(str, owners)))
    return comms


class SubnetSync(Strategy):
    """SDP on the one training loop: this rank's subnetwork on its rows of the batch, gradients
    averaged among each unit's owners, the optimizer over owned tensors only."""

    phase = "grad-sync"

    def __init__(self, ctx, model: torch.nn.Module, ownership: Ownership, mask: str):
        self.shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
        self.subnet = Subnet(model, ownership, ctx.rank, mask)
        self.ownership, self.mask = ownership, mask
        meter = ActivationMeter(exclude=list(self.subnet.held.values()))
        super().__init__(ctx, model, make_optimizer(self.subnet.trainable(), ctx.cfg),
                         shard=ctx.rank, shards=ctx.world_size, holds_state=False, meter=meter)
        self.comms = owner_comms(ctx.comm, ownership.owner_sets())
        self.refreshes = mask == "backward" and any(
            len(u.owners) < ownership.world_size for u in ownership.units if u.numel)

    def sync(self, step: int) -> None:
        with self.ctx.ledger.label(phase=self.phase):
            for owners, comm in self.comms.items():
                tensors = [t for u in self.subnet.owned if u.owners == owners
                           for t in self.subnet.tensors(u)]
                grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in tensors]
                flat = torch.cat([g.reshape(-1) for g in grads])  # (elements owned by `owners`,)
                comm.all_reduce(flat, op="avg")  # (same,) averaged among the owners only
                offset = 0
                for t in tensors:
                    t.grad = flat[offset:offset + t.numel()].view_as(t)  # (piece shape)
                    offset += t.numel()

    def update(self, step: int) -> None:
        super().update(step)
        if self.refreshes:
            with self.ctx.ledger.label(phase="param-refresh"):
                self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Backward masking: every rank gets the new values of the units it does not own."""
        own = self.ownership
        mine = [t.reshape(-1) for u in own.published(self.ctx.rank) for t in self.subnet.tensors(u)]
        flat = torch.cat(mine) if mine else torch.zeros(0)  # (published by this rank,)
        sizes = [own.published_numel(r) for r in range(own.world_size)]
        gathered = self.ctx.comm.all_gather(flat, sizes=sizes)  # (Σ published,) in rank order
        offset = 0
        for r in range(own.world_size):
            for unit in own.published(r):
                for t in self.subnet.tensors(unit):
                    if self.ctx.rank not in unit.owners:
                        t.copy_(gathered[offset:offset + t.numel()].view_as(t))  # (piece shape)
                    offset += t.numel()

    def memory(self) -> dict:
        """Measured bytes held: every held piece (frozen ones too), owned gradients, Adam state."""
        return model_memory(self.subnet.held.values(), self.optimizer)

    def extras(self) -> dict:
        return {"pieces": self.subnet.state(), "shapes": self.shapes,
                "owned_numel": self.ownership.owned_numel(self.ctx.rank)}
