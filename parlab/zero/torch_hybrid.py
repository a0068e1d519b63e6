"""HSDP, PyTorch's hybrid sharding: ZeRO-3 inside groups of `shard` ranks, replicas across them
(Zhao et al., "PyTorch FSDP", VLDB 2023, §3.2.2 — on a cluster, shard inside a node over NVLink
and replicate across nodes, so only an all-reduce of each rank's 1/G shard crosses the slower link).

`torch-hsdp` is FSDP2's `fully_shard` over a 2-D device mesh ("replicate", "shard") of shape
(N/G, G): each block's parameters are all-gathered inside the rank's shard group before forward and
backward, its gradients reduce-scattered there, then the 1/G shard all-reduced across the N/G
replicas. It computes the same training as one process (`exact=True`). Its bytes bypass `Comm`;
the ledger records, per step, nominal ring bytes of those four collectives over the group each
runs on (G for the gathers and the reduce-scatter, N/G for the all-reduce of Ψ/G elements).
`shard=None` shards over the whole world (plain FSDP, no replica).
"""

from __future__ import annotations

import math

from parlab.core import cost
from parlab.core.checks import Int
from parlab.core.memory import ActivationMeter
from parlab.engine.loop import build_model, make_optimizer, train
from parlab.engine.runner import register
from parlab.zero.shard import unit_modules
from parlab.zero.torch_sharded import TorchSharded, _local, _validate


def _validate_hsdp(cfg) -> None:
    _validate(cfg)
    shard = cfg.options["shard"]
    if shard is not None and cfg.world_size % shard:
        raise ValueError(f"shard={shard!r} must divide world_size={cfg.world_size} (replicas of "
                         "shard groups)")


class HybridSharded(TorchSharded):
    """FSDP2 over a (replicate, shard) mesh; each step's nominal bytes over each collective's own
    group: gathers and reduce-scatter among the G ranks of the shard group, the all-reduce of the
    Ψ/G shard among the N/G replicas."""

    def __init__(self, ctx, model, optimizer, loss_fn, meter, full_state, shard: int):
        super().__init__(ctx, model, optimizer, loss_fn, None, stage=3, meter=meter,
                         full_state=full_state)
        self.group, self.replicas = shard, ctx.world_size // shard

    def sync(self, step: int) -> None:
        psi, g, r = self.flat.numel(), self.group, self.replicas
        in_group, replica = self.ctx.rank % g, self.ctx.rank // g
        ops = [("all_gather", cost.ring_all_gather(psi, g, in_group), psi),
               ("all_gather", cost.ring_all_gather(psi, g, in_group), psi),
               ("reduce_scatter", cost.ring_reduce_scatter(psi, g, in_group), psi)]
        shard_numel = math.ceil(psi / g)  # (Ψ/G,) the rank's shard, all-reduced across replicas
        ops.append(("all_reduce", cost.ring_all_reduce(shard_numel, r, replica), shard_numel))
        with self.ctx.ledger.label(phase="grad-sync"):
            for op, (sent, recv, rounds), numel in ops:
                self.ctx.comm.record_nominal(op, self.flat, numel=numel, algo="torch-hsdp",
                                             sent=sent, recv=recv, rounds=rounds)


@register("torch-hsdp", summary="PyTorch FSDP2 hybrid sharding: shard in groups, replicate across "
          "(nominal bytes in the ledger)", exact=True, validate=_validate_hsdp,
          options={"shard": Int(None, min=1, none=True)})  # ranks per shard group; None: all
def torch_hsdp(ctx):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    shard = ctx.cfg.options["shard"] or ctx.world_size
    model = build_model(ctx.cfg)
    mesh = init_device_mesh("cpu", (ctx.world_size // shard, shard),
                            mesh_dim_names=("replicate", "shard"))  # (N/G, G)
    meter = ActivationMeter()
    for _, module, _ in unit_modules(model):
        if module is not model:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for _, module, _ in unit_modules(model):  # runs after FSDP's unshard: the gathered params
        module.register_forward_pre_hook(
            lambda m, args: meter.exclude(_local(p) for p in m.parameters()))
    optimizer = make_optimizer(model.parameters(), ctx.cfg)

    def full_state():
        return {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}

    return train(ctx, HybridSharded(ctx, model, optimizer, model.loss, meter, full_state, shard))
