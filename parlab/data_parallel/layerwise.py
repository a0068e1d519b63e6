"""Layer-wise deferred updates: apply each group's optimizer step just before its next forward.

WFBP still waits for *all* gradients before the update, so the next forward cannot start until
the last all-reduce — the one of the first layers, produced last by backward — has landed. The
next forward needs the first layers first, though: if each group of parameters is updated just
before the first module that uses it runs (a forward pre-hook), the forward of layer 0 waits
only for layer 0's communication, and the rest keeps flowing while the forward computes.
ByteScheduler (Peng et al., SOSP 2019) and P3 (Jayarajan et al., SysML 2019) use this to make
*priority* pay off; DeAR (Zhang et al., ICDCS 2023) to overlap its all-gather with the forward.

Each group gets its own optimizer. AdamW and SGD update every element independently, so stepping
groups separately is the same arithmetic as one optimizer over all parameters: exact. The
optimizers are the run's (`make_optimizer` of its config), or a caller's own optimizer cut per
group (`split_optimizer`: its class and each parameter's settings, e.g. the composed step's
optimizer handed to `parlab.data_parallel.dear.DeARReducer`).

A reducer that updates this way owns the update (`OwnsUpdate`: DeAR's `dear.DeARReducer`, P3's
`priority.PriorityReducer`); chapter 01's loop runs it through `DeferredSync`, the planner's
composed step through `parlab.data_parallel.apply.apply_dp`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from parlab.data_parallel.strategy import GradSync
from parlab.engine.loop import make_optimizer


def split_optimizer(optimizer: torch.optim.Optimizer) -> Callable[[list], torch.optim.Optimizer]:
    """A factory of `optimizer` over some of its parameters: the same class, each parameter in a
    group with its own group's settings (lr, betas, eps, weight decay ...). Cut before the first
    step: the state of an element-wise optimizer starts empty, so the pieces step as the whole."""
    if optimizer.state:
        raise ValueError(f"optimizer={type(optimizer).__name__} has already stepped: split it "
                         "before its first step (its state would not follow the parameters)")
    group_of = {id(p): g for g, group in enumerate(optimizer.param_groups) for p in group["params"]}

    def make(params: list) -> torch.optim.Optimizer:
        missing = [tuple(p.shape) for p in params if id(p) not in group_of]
        if missing:
            raise ValueError(f"parameters of shapes {missing} are not {type(optimizer).__name__}'s")
        groups = []
        for g, group in enumerate(optimizer.param_groups):
            mine = [p for p in params if group_of[id(p)] == g]
            if mine:
                groups.append({**{k: v for k, v in group.items() if k != "params"},
                               "params": mine})
        return type(optimizer)(groups)

    return make


class LayerwiseUpdate:
    """One optimizer per parameter group, stepped on the group's first use in the next forward.

    `prepare(g)` must leave group g's averaged gradients in `.grad` (it waits for the group's
    communication). `arm()` after backward marks every group as owed an update. `forward_span()`
    returns the running forward's `ComputeSpan` (paused while an update blocks), or None.
    `make(params)`: each group's optimizer (default: `make_optimizer` of the run's config; a
    caller's own optimizer cut per group: `split_optimizer`).
    """

    def __init__(self, ctx, model: torch.nn.Module, groups: list[list[torch.nn.Parameter]],
                 prepare: Callable[[int], None], forward_span: Callable = lambda: None,
                 make: Callable[[list], torch.optim.Optimizer] | None = None):
        self.ctx, self.groups, self.prepare = ctx, groups, prepare
        self.forward_span = forward_span
        make = make or (lambda group: make_optimizer(group, ctx.cfg))
        self.optimizers = [make(group) for group in groups]
        self.owed: set[int] = set()
        self.applied_order: list[int] = []  # the order updates ran in the last step (for the notebook)
        group_of = {id(p): g for g, group in enumerate(groups) for p in group}
        for module in model.modules():
            mine = sorted({group_of[id(p)] for p in module.parameters(recurse=False)})
            if mine:
                module.register_forward_pre_hook(partial(self._before_forward, tuple(mine)))

    def arm(self) -> None:
        self.owed = set(range(len(self.groups)))
        self.applied_order = []

    def _before_forward(self, groups: tuple, module, args) -> None:
        for g in groups:
            if g in self.owed:
                self.apply(g)

    def apply(self, g: int) -> None:
        self.owed.discard(g)
        self.applied_order.append(g)
        span = self.forward_span()
        if span is not None:
            span.pause()  # the forward is not computing while it waits and updates
        self.prepare(g)  # blocks on this group's communication only
        with self.ctx.span("optimizer", group=g, step=self.ctx.ledger.labels.get("step")):
            self.optimizers[g].step()
            self.optimizers[g].zero_grad(set_to_none=True)
        if span is not None:
            span.resume()

    def flush(self, order: list[int]) -> None:
        """Apply every owed update now, in `order` (after the last step: nothing else will)."""
        for g in order:
            if g in self.owed:
                self.apply(g)


class OwnsUpdate:
    """What a reducer whose communication ends in the next forward adds (`owns_update`: DeAR,
    P3's priority): it takes the update over — one optimizer per bucket, stepped by
    `LayerwiseUpdate` just before the bucket's first module runs — and the loop skips its own
    step. The reducer supplies `buckets`, `forward_order` (buckets in the order the next forward
    meets them) and `_prepare(g)` (wait for bucket g's communication, gradients into `.grad`)."""

    owns_update = True
    options: tuple = ()  # the keyword options of its own it takes (priority: partition_kb, credit)
    layerwise: LayerwiseUpdate | None = None

    def own_update(self, ctx, model, optimizer=None,
                   forward_span: Callable = lambda: None) -> list:
        """Take over the update of `model`'s bucketed parameters: one optimizer per bucket —
        `optimizer` cut per bucket (`split_optimizer`: its class and settings), or None: the
        run's (`make_optimizer` of `ctx.cfg`) — each stepped just before the bucket's first
        module runs in the next forward (`forward_span()`: that forward's `ComputeSpan`, paused
        while it waits). Returns the per-bucket optimizers."""
        make = split_optimizer(optimizer) if optimizer is not None else None
        self.layerwise = LayerwiseUpdate(ctx, model, [b.params for b in self.buckets],
                                         self._prepare, forward_span, make=make)
        return self.layerwise.optimizers

    def require_owner(self) -> None:
        if self.layerwise is None:
            raise RuntimeError(f"{type(self).__name__} owns the update: call "
                               "own_update(ctx, model, ...) before the first step")

    def flush(self) -> None:
        """After the last step: every owed update now, first layers first."""
        if self.layerwise is not None:
            self.layerwise.flush(self.forward_order)


class DeferredSync(GradSync):
    """The loop's strategy around a reducer that owns the update (`OwnsUpdate`): it hands the
    reducer the run's optimizers per bucket and leaves every step to the next forward.
    `make_reducer(model, comm)`: the reducer, attached, over the world and the trainable
    parameters (`apply.world_reducer`, bound to its scheme's options)."""

    def __init__(self, ctx, model, make_reducer: Callable):
        super().__init__(ctx, model)
        self.reducer = make_reducer(model, self.comm)
        self.set_optimizers(self.reducer.own_update(ctx, model,
                                                    forward_span=lambda: self.forward_span))

    @property
    def buckets(self):
        return self.reducer.buckets

    @property
    def layerwise(self) -> LayerwiseUpdate:
        return self.reducer.layerwise

    @property
    def forward_order(self) -> list[int]:
        return self.reducer.forward_order

    def before_micro(self, last: bool) -> None:
        super().before_micro(last)
        self.reducer.before_micro(last)

    def after_backward(self) -> None:
        self.reducer.after_backward()

    def update(self, step: int) -> None:
        """Deferred: each bucket is updated in the next forward, once its communication is in."""
        self.observe_memory()

    def flush(self) -> None:
        self.reducer.flush()

    def comm_buffers(self):
        return self.reducer.buffers()
