"""A scheme registered from outside parlab (`parlab.register`), as a user's own would be: chapter
01's data-parallel strategies on a model whose gradient turns non-finite on one rank at one step
(tests/test_divergence.py: the error names the rank and step where it was born)."""

from __future__ import annotations

import torch

import parlab
from parlab.core.checks import Choice, Int
from parlab.data_parallel.sync_after_backward import NaiveSync
from parlab.data_parallel.sync_in_backward import OverlapSync
from parlab.engine.loop import build_model, train

POISON = {"nan": float("nan"), "inf": float("inf"), "huge": 3e38}  # huge: finite, 2x overflows


@parlab.register("test-poisoned-gradient", summary="DDP with one poisoned gradient", exact=False,
                 options={"sync": Choice("naive", ("naive", "overlap")),
                          "poison_rank": Int(1, min=-1), "poison_step": Int(3, min=0),
                          "poison": Choice("nan", tuple(POISON)),
                          "tensor": Choice("layers.1.weight", ("layers.1.weight",))})
def poisoned_gradient(ctx):
    """ddp-naive or ddp-overlap; the gradient of `tensor` gets `poison` added on `poison_rank`
    (-1: every rank) at `poison_step` (a tensor hook: before it is accumulated, before any hook
    of the sync)."""
    o = ctx.cfg.options
    model = build_model(ctx.cfg)
    strategy = (NaiveSync(ctx, model) if o["sync"] == "naive"
                else OverlapSync(ctx, model, bucket_mb=0.0))

    def poison(grad):
        if o["poison_rank"] in (ctx.rank, -1) and strategy.step_index == o["poison_step"]:
            if o["poison"] == "huge":
                return torch.full_like(grad, POISON["huge"])
            return grad + POISON[o["poison"]]
        return grad

    dict(model.named_parameters())[o["tensor"]].register_hook(poison)
    return train(ctx, strategy)
