"""The pieces every training scheme shares: model and optimizer from the config, the step's batch,
and the data-parallel training loop with a hook where each scheme synchronises gradients.

The single-process reference (`parlab/trainers/reference.py`) is this loop with one shard and no
hook, so a data-parallel scheme differs from the reference only in what its hooks do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from parlab import models
from parlab.core.memory import ActivationMeter, model_memory
from parlab.models import data


def build_model(cfg) -> torch.nn.Module:
    """The config's model; with `cfg.checkpoint` its blocks recompute their activations in backward.

    A scheme that builds its own modules honours `checkpoint=True` by wrapping each block's call
    in `parlab.models.gpt.maybe_checkpoint(fn, enabled, *args)`.
    """
    return models.build_model(cfg.model, cfg.model_config, cfg.seed,
                              checkpoint=getattr(cfg, "checkpoint", False))


def make_optimizer(params, cfg) -> torch.optim.Optimizer:
    """AdamW as Llama 2 trains (Touvron et al. 2023: β=(0.9, 0.95), ε=1e-5, weight decay 0.1), or
    plain SGD, at the config's learning rate.

    ε=1e-5 rather than PyTorch's 1e-8 also keeps the comparison with the reference honest: Adam's
    first update is g/(|g|+ε), so with ε=1e-8 a gradient of ~1e-9 (float round-off around zero)
    becomes a visible update, and a correct parallel scheme would differ from the reference by
    more than 1e-4 only because its sums were added in another order.
    """
    optimizer_class, settings = optimizer_spec(cfg)
    return optimizer_class(list(params), **settings)


def optimizer_spec(cfg) -> tuple[type, dict]:
    """(optimizer class, keyword settings) of `make_optimizer`, for wrappers such as
    ZeroRedundancyOptimizer that construct the optimizer themselves."""
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW, {"lr": cfg.lr, "betas": (0.9, 0.95), "eps": 1e-5, "weight_decay": 0.1}
    return torch.optim.SGD, {"lr": cfg.lr}


def step_batch(cfg, step: int, shard: int = 0, shards: int = 1):
    """This shard's rows of the global batch of `step`."""
    seq_len = getattr(cfg.model_config, "block_size", 0)
    batch = data.global_batch(cfg.model, step, cfg.batch_size, cfg.seed, seq_len)
    return data.shard(batch, shard, shards)


def state_of(model: torch.nn.Module) -> dict:
    """Parameters by name, detached clones on CPU (what RunResult.state holds)."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def data_parallel_loop(ctx, model, optimizer, dp_rank: int, dp_size: int,
                       sync_grads: Callable[[int], None] | None = None,
                       before_step: Callable[[int], None] | None = None,
                       after_step: Callable[[int], None] | None = None) -> dict:
    """Train on rows of the global batch; `sync_grads(step)` runs between backward and the update.

    Returns the worker output: loss contributions (local mean loss / dp_size, so the parent's sum
    is the global mean loss), this rank's state, and measured memory.
    """
    meter = ActivationMeter(exclude=model.parameters())
    losses, memory = [], {}
    for step in range(ctx.cfg.steps):
        with ctx.step(step):
            x, y = step_batch(ctx.cfg, step, dp_rank, dp_size)
            if before_step is not None:
                before_step(step)
            with ctx.span("forward"), meter:
                loss = model.loss(x, y)
            with ctx.span("backward"), meter:
                loss.backward()
            if sync_grads is not None:
                sync_grads(step)
            with ctx.span("optimizer"):
                optimizer.step()
            memory = model_memory(model.parameters(), optimizer)
            optimizer.zero_grad(set_to_none=True)
            if after_step is not None:
                after_step(step)
            losses.append(loss.item() / dp_size)
    memory["activations"] = meter.peak
    return {"losses": losses, "state": state_of(model) if dp_rank == 0 else None,
            "memory": memory}
