"""The one training loop every scheme drives, through a small strategy object.

    for step in range(strategy.first_step, steps):
        loss = strategy.forward_backward(step, strategy.batch(step))  # this rank's loss share
        strategy.sync(step)      # make the gradients global (all-reduce, reduce-scatter, ...)
        strategy.update(step)    # optimizer step, memory observed at its peak, zero_grad
        strategy.after_step(step)  # e.g. a checkpoint
    strategy.finish()            # deferred work (DeAR's last all-gather), after the last step

The single-process reference (`parlab/engine/reference.py`) is this loop with the default
`Strategy` on one shard; a data-parallel scheme differs from it only in `sync`, a pipeline only in
`forward_backward` (its schedule), ZeRO only in what it keeps. Everything else — the step's
batch, spans on the timeline, the activation meter, loss bookkeeping, the step clock, the typed
result — is here, once.

Step time (one definition for every chapter and benchmark): a step lasts from the moment it
begins on a rank to the moment the next one begins there (the last: to the end of training,
deferred work included), and the run's step time is the slowest rank's
(`RunResult.step_times`). Overlapped work that spills into the next step is thereby counted once.

Divergence: each step checks the loss, this rank's own gradients before `sync` and the ones
`sync` leaves, and at the end the parameters (`parlab.engine.divergence`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from parlab import models
from parlab.core import precision as mp
from parlab.core.memory import ActivationMeter, model_memory
from parlab.core.shapes import is_fake
from parlab.engine.divergence import (  # noqa: F401 - NonFiniteError: part of this module's API
    OWN_GRADIENT,
    SYNCED_GRADIENT,
    NonFiniteError,
    after_training,
    during_step,
    finite,
    first_nonfinite,
    first_nonfinite_gradient,
    nonfinite_event,
    on_nonfinite,
)
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


def micro_batches(batch, m: int) -> list[tuple]:
    """Cut a rank's rows of a step's batch into `m` equal micro-batches, in row order, so the mean
    of their mean losses is the rows' mean loss (gradient accumulation, a pipeline's micro-batches;
    divisibility is validated before any process starts)."""
    return list(zip(*(t.chunk(m) for t in batch)))  # m × ((rows/m, ...), ...)


def state_of(model: torch.nn.Module) -> dict:
    """Parameters by name, detached clones on CPU (what RunResult.state holds)."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@dataclass
class RankResult:
    """What a rank hands back to the parent (`parlab.run` sums, assembles and merges these)."""

    losses: list[float] | None  # this rank's share of each step's global loss; None: reports none
    state: dict | None  # parameters this rank holds (full, or its part for the scheme's assemble)
    memory: dict[str, int]  # measured bytes by kind: params, grads, optimizer, activations, ...
    step_marks: list[float] = field(default_factory=list)  # step starts, then the end (perf_counter)
    extras: dict = field(default_factory=dict)  # what a scheme's assemble or explore needs
    skipped: list[int] = field(default_factory=list)  # fp16-mixed: steps skipped on overflow
    loss_scales: list[float] = field(default_factory=list)  # fp16-mixed: S of each step
    pace: dict = field(default_factory=dict)  # paced clock: the pacer's stats (parlab.core.clock)
    nonfinite: list[dict] = field(default_factory=list)  # on_nonfinite="record": what was seen


class Strategy:
    """The default strategy: one model, one optimizer, this rank's rows of the batch, a plain
    forward and backward, no communication. Schemes override the hooks they change.

    model, optimizer: what trains. shard, shards: which rows of the global batch this rank takes
    (its data-parallel coordinate). reports_loss: whether this rank's loss counts (a tensor-parallel
    rank other than 0 computes the same loss as rank 0). holds_state: whether `state()` returns
    this rank's parameters.

    Mixed precision (`precision=`, `parlab.core.precision`) happens here, once: `model`'s
    parameters become the 16-bit compute copy (in place: the scheme's references and its
    optimizer's stay valid), `optimizer.step` the fp32-master step, and with fp16 `model.loss`
    scales its gradient. A scheme that builds flat buffers from the parameters before calling
    this constructor casts the model first (`to_compute_dtype`) so the buffers are 16-bit too.
    """

    first_step = 0  # a resumed run starts later
    initial_losses: list[float] = []  # the resumed steps' loss shares
    step_index = 0  # the loop's current step (set by `train`)
    native_precision = False  # True: the scheme's wrapper does mixed precision itself (FSDP2)

    def __init__(self, ctx, model, optimizer, shard: int = 0, shards: int = 1,
                 reports_loss: bool = True, holds_state: bool | None = None,
                 meter: ActivationMeter | None = None):
        self.ctx, self.model, self.optimizer = ctx, model, optimizer
        self.scaler = None
        self.masters = []
        if precision_of(ctx.cfg) != "fp32" and not self.native_precision:
            to_compute_dtype(model, ctx.cfg)
            if precision_of(ctx.cfg) == "fp16-mixed":
                self.scaler = mp.LossScaler(ctx.cfg.loss_scale or mp.INIT_SCALE,
                                            stop_below=on_nonfinite(ctx.cfg) == "raise")
                model.loss = self.scaler.wrap_loss(model.loss)
            self.mixed_optimizer(optimizer)
        self.shard, self.shards = shard, shards
        self.reports_loss = reports_loss
        self.holds_state = shard == 0 if holds_state is None else holds_state
        self.meter = meter if meter is not None else ActivationMeter(exclude=model.parameters())
        self.peak_memory: dict[str, int] = {}

    def mixed_optimizer(self, optimizer) -> None:
        """Give `optimizer` (over 16-bit parameters) fp32 master weights: its `step` becomes the
        mixed-precision step (fp16: skipped on overflow). Schemes with several optimizers call
        it for each further one."""
        self.masters.append(mp.MasterWeights(optimizer, self.ctx.comm, self.scaler,
                                             lambda: self.step_index))

    # ------------------------------------------------------------------ the hooks
    def batch(self, step: int):
        """This rank's rows of the step's global batch (floating inputs in the compute dtype)."""
        batch = step_batch(self.ctx.cfg, step, self.shard, self.shards)
        if precision_of(self.ctx.cfg) != "fp32" and not self.native_precision:
            batch = mp.cast_batch(batch, mp.compute_dtype(self.ctx.cfg.precision))
        return batch

    def loss(self, batch):
        x, y = batch
        return self.model.loss(x, y)

    def forward_backward(self, step: int, batch) -> float:
        """Forward and backward on `batch`; returns this rank's share of the global mean loss."""
        with self.ctx.span("forward", step=step), self.meter:
            loss = self.loss(batch)
        with self.ctx.span("backward", step=step), self.meter:
            loss.backward()
        return loss.item() / self.shards

    def sync(self, step: int) -> None:
        """Make the gradients those of the global loss (nothing to do on one rank)."""

    def update(self, step: int) -> None:
        with self.ctx.span("optimizer", step=step):
            self.optimizer.step()
        self.observe_memory()  # gradients and optimizer state both alive: the peak
        self.optimizer.zero_grad(set_to_none=True)

    def after_step(self, step: int) -> None:
        """After the update (checkpoints)."""

    def finish(self) -> None:
        """After the last step (strategies with a deferred update apply it here)."""

    # ------------------------------------------------------------------ what comes back
    def memory(self) -> dict:
        """Measured bytes held now: params, grads, optimizer state."""
        return model_memory(self.model.parameters(), self.optimizer)

    def observe_memory(self) -> None:
        """Keep, per kind, the most bytes seen so far (`peak_memory`)."""
        for kind, nbytes in self.memory().items():
            self.peak_memory[kind] = max(self.peak_memory.get(kind, 0), nbytes)

    def state(self) -> dict | None:
        """The parameters this rank holds; in mixed precision their fp32 master weights."""
        if not self.holds_state:
            return None
        state = state_of(self.model)
        masters = {id(p): m for w in self.masters for p, m in w.masters.items()}
        for name, p in self.model.named_parameters():
            if id(p) in masters:
                state[name] = masters[id(p)].detach().clone().view_as(p)
        return state

    def extras(self) -> dict:
        return {}


def precision_of(cfg) -> str:
    return getattr(cfg, "precision", "fp32")


def to_compute_dtype(model: torch.nn.Module, cfg) -> torch.nn.Module:
    """Cast `model`'s floating parameters and buffers to the run's compute dtype, in place (the
    Parameter objects stay: `Module.to` replaces their data). No-op in fp32 or when cast already."""
    if precision_of(cfg) != "fp32":
        dtype = mp.compute_dtype(cfg.precision)
        tensors = list(model.parameters()) + list(model.buffers())
        if tensors and is_fake(tensors[0]):  # shapes-only: Module.to cannot swap fake parameters
            for t in tensors:
                # cast already, or a parameter ZeRO-3 released (it points at an empty real
                # tensor until its next gather): nothing to do
                if t.numel() and t.is_floating_point() and t.dtype != dtype:
                    t.data = t.detach().to(dtype)
        else:
            model.to(dtype)
    return model


def train(ctx, strategy: Strategy) -> RankResult:
    """Run `ctx.cfg.steps` steps of `strategy` on this rank; see the module docstring."""
    losses = list(strategy.initial_losses)
    marks, events = [], []
    check_gradients = strategy.scaler is None  # fp16: an overflow is the scaler's to skip
    for step in range(strategy.first_step, ctx.cfg.steps):
        with ctx.step(step):
            strategy.step_index = step
            marks.append(ctx.timeline.now())
            loss = strategy.forward_backward(step, strategy.batch(step))
            if not events and not finite(loss):
                events.append(nonfinite_event(ctx, step, loss, first_nonfinite(during_step(strategy))))
            if not events and check_gradients:  # born here, before the sync spreads it
                own = first_nonfinite_gradient(strategy)
                if own is not None:
                    events.append(nonfinite_event(ctx, step, loss, own, OWN_GRADIENT))
            strategy.sync(step)
            if not events and check_gradients:  # finite here, not after the sync: a peer's
                synced = first_nonfinite_gradient(strategy)
                if synced is not None:
                    events.append(nonfinite_event(ctx, step, loss, synced, SYNCED_GRADIENT))
            strategy.update(step)
            strategy.after_step(step)
            losses.append(loss)
    strategy.finish()
    marks.append(ctx.timeline.now())
    strategy.observe_memory()
    memory = dict(strategy.peak_memory)
    memory["activations"] = strategy.meter.peak
    scaler = strategy.scaler
    state = strategy.state()
    bad = first_nonfinite(after_training(strategy, state))  # one isfinite pass per tensor
    if bad is not None:
        events.append(nonfinite_event(ctx, ctx.cfg.steps - 1, None, bad))
    return RankResult(losses if strategy.reports_loss else None, state, memory, marks,
                      strategy.extras(), list(scaler.skipped) if scaler else [],
                      list(scaler.history) if scaler else [], nonfinite=events)


def step_times(marks_per_rank: list[list[float]]) -> list[float]:
    """Seconds of each step, the slowest rank's (see the module docstring for the definition)."""
    per_rank = [[b - a for a, b in zip(marks, marks[1:])] for marks in marks_per_rank if marks]
    return [max(column) for column in zip(*per_rank)] if per_rank else []


class LossModule(torch.nn.Module):
    """`model.loss` as a module's forward: wrappers such as DDP hook backward only through their
    own forward, so the loss must be computed inside it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return self.model.loss(x, y)
