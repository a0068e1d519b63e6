"""PyTorch's own sharded data parallelism, on the same model and batches, to compare with ours.

* `torch-zero`: `DistributedDataParallel` + `ZeroRedundancyOptimizer` (ZeRO-1: each rank keeps the
  Adam moments of a subset of *whole* parameters and broadcasts them after its step; Rajbhandari
  et al. SC 2020; PyTorch docs "Shard Optimizer States with ZeroRedundancyOptimizer").
* `torch-fsdp`: FSDP2 `torch.distributed.fsdp.fully_shard` on every block and on the root (ZeRO-3;
  Zhao et al., "PyTorch FSDP", VLDB 2023), parameters as DTensors sharded on dim 0.

Their communication goes through torch.distributed directly, so **their bytes are not in the
ledger** (the ledger of these schemes is empty); compare their memory and step time with ours.
Memory is measured from the live local tensors, as for every scheme.
"""

from __future__ import annotations

from parlab.core.memory import ActivationMeter, optimizer_state_tensors, tensor_bytes
from parlab.data_parallel.torch_ddp import LossModule
from parlab.engine.loop import build_model, make_optimizer, optimizer_spec, state_of, step_batch
from parlab.engine.runner import register
from parlab.zero.shard import unit_modules


def _validate(cfg) -> None:
    if cfg.batch_size % cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by "
                         f"world_size={cfg.world_size} (data-parallel ranks)")


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _memory(model, optimizer) -> dict:
    params = [_local(p) for p in model.parameters()]
    grads = [_local(p.grad) for p in model.parameters() if p.grad is not None]
    states = [_local(t) for t in optimizer_state_tensors(optimizer)]
    return {"params": tensor_bytes(params), "grads": tensor_bytes(grads),
            "optimizer": tensor_bytes(states)}


def _loop(ctx, step_fn, model, optimizer, meter, local_optimizer=None) -> tuple[list, dict]:
    """Forward, backward, step over the rank's rows; memory measured after the step."""
    n, rank = ctx.world_size, ctx.rank
    losses, memory = [], {}
    for step in range(ctx.cfg.steps):
        with ctx.step(step):
            x, y = step_batch(ctx.cfg, step, rank, n)
            with ctx.span("forward"), meter:
                loss = step_fn(x, y)
            with ctx.span("backward"), meter:
                loss.backward()
            with ctx.span("optimizer"):
                optimizer.step()
            memory = _memory(model, local_optimizer or optimizer)
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item() / n)
    memory["activations"] = meter.peak
    return losses, memory


@register("torch-zero", summary="PyTorch DDP + ZeroRedundancyOptimizer (bytes not in the ledger)",
          exact=True, validate=_validate)
def torch_zero(ctx):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    model = build_model(ctx.cfg)
    ddp = DistributedDataParallel(LossModule(model), gradient_as_bucket_view=True)
    optimizer_class, settings = optimizer_spec(ctx.cfg)  # the same optimizer as every scheme
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_class,
                                        **settings)
    meter = ActivationMeter(exclude=model.parameters())
    losses, memory = _loop(ctx, ddp, model, optimizer, meter, local_optimizer=optimizer.optim)
    return {"losses": losses, "state": state_of(model) if ctx.rank == 0 else None,
            "memory": memory}


@register("torch-fsdp", summary="PyTorch FSDP2 fully_shard per block (bytes not in the ledger)",
          exact=True, validate=_validate)
def torch_fsdp(ctx):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = build_model(ctx.cfg)
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    meter = ActivationMeter()
    for _, module, _ in unit_modules(model):
        if module is not model:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for _, module, _ in unit_modules(model):  # runs after FSDP's unshard: the gathered params
        module.register_forward_pre_hook(
            lambda m, args: meter.exclude(_local(p) for p in m.parameters()))
    optimizer = make_optimizer(model.parameters(), ctx.cfg)
    losses, memory = _loop(ctx, model.loss, model, optimizer, meter)
    state = {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}
    return {"losses": losses, "state": state if ctx.rank == 0 else None, "memory": memory}
