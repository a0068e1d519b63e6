"""PyTorch's own sharded data parallelism, on the same model and batches, to compare with ours.

* `torch-zero`: `DistributedDataParallel` + `ZeroRedundancyOptimizer` (ZeRO-1 over whole
  parameters; Rajbhandari et al. SC 2020).
* `torch-fsdp`: FSDP2 `fully_shard` on every block and on the root (ZeRO-3; Zhao et al.,
  "PyTorch FSDP", VLDB 2023); with `precision="bf16-mixed"` FSDP2's `MixedPrecisionPolicy`
  (4 + 4 + 8 bytes per parameter ÷ N against our zero3's 2 + 2 + 12: the same 16Ψ/N). `dcp_dir=`
  saves with PyTorch's `dcp.save`, which parlab resumes (`parlab.zero.dcp_format`).

Their communication bypasses `Comm`: the ledger holds one nominal record per collective a ZeRO
stage performs (`nominal=True`). Memory is measured from the live local tensors. Mixed precision
of each (and why `torch-zero` under autocast keeps fp32 bytes): docs/zero.md,
`parlab.zero.torch_sharded`.
"""

from __future__ import annotations

import os
from functools import partial

import torch

from parlab.core.checks import Choice
from parlab.core.memory import ActivationMeter, optimizer_state_tensors, tensor_bytes
from parlab.core.precision import compute_dtype
from parlab.engine.loop import (
    LossModule,
    Strategy,
    build_model,
    make_optimizer,
    optimizer_spec,
    state_of,
    train,
)
from parlab.engine.runner import register
from parlab.zero.shard import unit_modules


def _validate(cfg) -> None:
    if cfg.batch_size % cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by "
                         f"world_size={cfg.world_size} (data-parallel ranks)")


def _validate_fsdp(cfg) -> None:
    _validate(cfg)
    where = cfg.options["dcp_dir"]
    if where is not None:
        from parlab.zero.checkpoint_integrity import _check_writable

        if not isinstance(where, (str, os.PathLike)):
            raise ValueError(f"dcp_dir={where!r} must be a path or None")
        _check_writable(where)


def _save_dcp(ctx, model, optimizer, finish) -> None:
    """PyTorch's own checkpoint of the FSDP2 run (collective over the world's process group)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    finish()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optimizer": optim_sd, "step": torch.tensor(ctx.cfg.steps)},
             checkpoint_id=str(ctx.cfg.options["dcp_dir"]))


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _memory(model, optimizer) -> dict:
    params = [_local(p) for p in model.parameters()]
    grads = [_local(p.grad) for p in model.parameters() if p.grad is not None]
    states = [_local(t) for t in optimizer_state_tensors(optimizer)]
    return {"params": tensor_bytes(params), "grads": tensor_bytes(grads),
            "optimizer": tensor_bytes(states)}


class TorchSharded(Strategy):
    """A PyTorch wrapper does the sharding and the communication inside forward, backward and
    step; memory is measured from the local tensors (DTensor shards). Their collectives bypass
    `Comm`: each step is recorded with the nominal ring bytes of the collectives they perform,
    marked `nominal=True`."""

    def __init__(self, ctx, model, optimizer, loss_fn, local_optimizer, stage: int, meter=None,
                 full_state=None, native_precision: bool = False):
        self.native_precision = native_precision  # FSDP2's MixedPrecisionPolicy, not the loop's
        super().__init__(ctx, model, optimizer, shard=ctx.rank, shards=ctx.world_size,
                         meter=meter)
        self.loss_fn, self.local_optimizer, self.stage = loss_fn, local_optimizer, stage
        self.full_state = full_state
        self.flat = torch.empty(sum(p.numel() for p in model.parameters()))  # (Ψ,) for the record
        policy = mixed_precision_policy(ctx.cfg) if native_precision and stage == 3 else None
        self.flat_of = {} if policy is None else {  # FSDP2's mixed precision: what each op moves
            "all_gather": self.flat.to(policy.param_dtype),  # (Ψ,) 16-bit parameters
            "reduce_scatter": self.flat.to(policy.reduce_dtype)}  # (Ψ,) gradients, reduce_dtype

    def loss(self, batch):
        x, y = batch
        return self.loss_fn(x, y)

    def sync(self, step: int) -> None:
        """Nothing to do (the wrapper communicated); record what it moved, nominally: DDP +
        ZeroRedundancyOptimizer all-reduce the gradients, then each rank broadcasts its updated
        parameters (an all-gather of Ψ in volume); FSDP2 all-gathers the parameters for forward
        and again for backward and reduce-scatters the gradients."""
        ops = (["all_reduce", "all_gather"] if self.stage == 1
               else ["all_gather", "all_gather", "reduce_scatter"])
        with self.ctx.ledger.label(phase="grad-sync"):
            for op in ops:
                self.ctx.comm.record_nominal(op, self.flat_of.get(op, self.flat),
                                             algo=f"torch-zero{self.stage}")

    def memory(self) -> dict:
        return _memory(self.model, self.local_optimizer or self.optimizer)

    def extras(self) -> dict:
        return {"stage": self.stage}  # ZeroRedundancyOptimizer: 1, FSDP: 3

    def state(self) -> dict | None:
        state = self.full_state() if self.full_state else state_of(self.model)  # collective
        return state if self.holds_state else None


def autocast(loss_fn, cfg):
    """`loss_fn` under `torch.autocast` (CPU) in the run's compute dtype; unchanged in fp32."""
    if cfg.precision == "fp32":
        return loss_fn
    dtype = compute_dtype(cfg.precision)

    def autocast_loss(*args):
        with torch.autocast("cpu", dtype=dtype):
            return loss_fn(*args)
    return autocast_loss


@register("torch-zero", summary="PyTorch DDP + ZeroRedundancyOptimizer (nominal bytes in the ledger)",
          exact=True, validate=_validate, precisions=("fp32", "bf16-mixed"))
def torch_zero(ctx):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    model = build_model(ctx.cfg)
    ddp = DistributedDataParallel(LossModule(model), gradient_as_bucket_view=True)
    optimizer_class, settings = optimizer_spec(ctx.cfg)  # the same optimizer as every scheme
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_class,
                                        **settings)
    return train(ctx, TorchSharded(ctx, model, optimizer, autocast(ddp, ctx.cfg), optimizer.optim,
                                   stage=1, native_precision=True))


def mixed_precision_policy(cfg):
    """FSDP2's MixedPrecisionPolicy for the run's precision (None in fp32): parameters in the
    compute dtype, gradients reduced in it or, with reduce_dtype="fp32", in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if cfg.precision == "fp32":
        return None
    dtype = compute_dtype(cfg.precision)
    reduce = torch.float32 if cfg.options["reduce_dtype"] == "fp32" else dtype
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=reduce)


@register("torch-fsdp", summary="PyTorch FSDP2 fully_shard per block (nominal bytes in the ledger)",
          exact=True, validate=_validate_fsdp,
          options={"reduce_dtype": Choice("compute", ("compute", "fp32")),
                   "dcp_dir": None},  # write PyTorch's DCP checkpoint here after the last step
          precisions=("fp32", "bf16-mixed"))
def torch_fsdp(ctx):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = build_model(ctx.cfg)
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    meter = ActivationMeter()
    policy = {"mp_policy": p} if (p := mixed_precision_policy(ctx.cfg)) is not None else {}
    for _, module, _ in unit_modules(model):
        if module is not model:
            fully_shard(module, mesh=mesh, **policy)
    fully_shard(model, mesh=mesh, **policy)
    for _, module, _ in unit_modules(model):  # runs after FSDP's unshard: the gathered params
        module.register_forward_pre_hook(
            lambda m, args: meter.exclude(_local(p) for p in m.parameters()))
    optimizer = make_optimizer(model.parameters(), ctx.cfg)

    def full_state():
        return {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}

    strategy = TorchSharded(ctx, model, optimizer, model.loss, None, stage=3, meter=meter,
                            full_state=full_state, native_precision=True)
    if ctx.cfg.options["dcp_dir"] is not None:
        strategy.finish = partial(_save_dcp, ctx, model, optimizer, strategy.finish)
    return train(ctx, strategy)
