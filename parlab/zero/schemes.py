"""ZeRO-1, ZeRO-2, ZeRO-3: data parallelism without the redundant copies (Rajbhandari et al., SC 2020).

Each rank trains on its rows of the global batch exactly as DDP does, so the losses and the final
parameters equal the single process's; what changes is what a rank *keeps*
(`parlab.zero.zero_engine`): 1/N of the Adam moments (zero1), also 1/N of the gradients (zero2),
also 1/N of the parameters between uses (zero3). Memory per rank is measured from the tensors
each rank holds (`params`, `grads`, `optimizer`, `activations`, and zero3's `gathered_peak`,
`padding`). zero3's `prefetch`: FSDP's prefetch, same bytes, same result.

Shared options: `save_dir`, `save_every`, `resume`, `keep`, `resume_from` (sharded and DCP
checkpoints: `parlab.zero.checkpoint`, `parlab.zero.dcp_format`), `fail_at_step`, `fail_rank`
(fault injection) and `algo` ("gloo" or "ring"). What each accepts and refuses:
docs/zero.md, `parlab.zero.schemes`.
"""

from __future__ import annotations

import os
import signal
from contextlib import nullcontext
from functools import partial

from parlab.core.checks import Bool, Choice, Int
from parlab.core.memory import ActivationMeter
from parlab.core.mesh import Mesh
from parlab.core.precision import PRECISIONS
from parlab.core.rendezvous import under_torchrun
from parlab.engine import loop
from parlab.engine.dimension import dimension
from parlab.engine.loop import Strategy, build_model, make_optimizer, to_compute_dtype
from parlab.engine.runner import register
from parlab.zero import checkpoint as ckpt_mod
from parlab.zero import (
    checkpoint_integrity,
    dcp_format,
    dp_checkpoint,  # noqa: F401  (registers chapter 01's DDP checkpoints)
    run_lock,
)
from parlab.zero.apply import apply_zero
from parlab.zero.cost import predict
from parlab.zero.shard import FlatLayout, assemble_state

OPTIONS = {"save_dir": None, "save_every": Int(0, min=0),  # 0: never
           "resume": Choice(False, (False, True, "must")),  # "must": refuse without a checkpoint
           "keep": Int(ckpt_mod.KEEP, min=1),  # checkpoints kept in save_dir
           "resume_from": None,  # a DCP checkpoint directory (parlab's or PyTorch's)
           # resume=True finding only damaged checkpoints starts at step 0 instead of refusing
           "allow_fresh_start": Bool(False),
           "fail_at_step": Int(None, min=0, none=True), "fail_rank": Int(0, min=0),
           # who runs the all-gathers and reduce-scatters: gloo's own or the pipelined ring
           # (parlab.core.collectives; the same bytes, gloo's reduce-scatter is slow on CPU)
           "algo": Choice("gloo", ("gloo", "ring"))}
# zero3 only: FSDP's forward/backward prefetch and asynchronous gradient reduce-scatter (exact).
# Off by default while chapter 02's golden cells show the one-block gathered peak.
ZERO3_OPTIONS = {**OPTIONS, "prefetch": Bool(False)}


def validate(cfg) -> None:
    o = cfg.options
    if cfg.batch_size % cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by "
                         f"world_size={cfg.world_size} (data-parallel ranks)")
    step = o["fail_at_step"]
    if step is not None and step >= cfg.steps:
        raise ValueError(f"fail_at_step={step!r} must be None or an int in [0, steps={cfg.steps})")
    rank = o["fail_rank"]
    if rank >= cfg.world_size:
        raise ValueError(f"fail_rank={rank!r} must be an int in [0, world_size={cfg.world_size})")
    checkpoint_integrity.check_options(cfg)


def hold(cfg):
    """What `parlab.run` holds around the launch: the save_dir's run lock (`run_lock.held`)."""
    directory = cfg.options.get("save_dir")
    return run_lock.held(directory) if directory is not None else nullcontext()


def _rank_locks(options, comm) -> bool:
    """Whether this rank takes the save_dir's lock itself: rank 0 under torchrun, where no
    launching process holds it (`hold`)."""
    return options["save_dir"] is not None and comm.rank == 0 and under_torchrun()


def assemble(outputs: list[dict], cfg) -> dict:
    """The full parameters from every rank's shards (the parent does it: no extra comm)."""
    layouts = [FlatLayout.from_meta(m) for m in outputs[0].extras["layouts"]]
    return assemble_state(layouts, [out.extras["shards"] for out in outputs])


class Zero(Strategy):
    """Data parallelism that keeps 1/N of the optimizer state (stage 1), of the gradients (2), of
    the parameters between uses (3): the `ZeroEngine` gathers, reduce-scatters and frees around
    forward and backward; the optimizer steps this rank's flat shards only."""

    def __init__(self, ctx, stage: int):
        cfg, comm, o = ctx.cfg, ctx.comm, ctx.cfg.options
        model = to_compute_dtype(build_model(cfg), cfg)  # 16-bit flat units in mixed precision
        meter = ActivationMeter()
        # the one way to attach ZeRO (`apply_zero`), on a one-dimensional mesh over the world;
        # reuse_world: the engine runs on `comm` itself, so the ledger's group stays "world"
        model = apply_zero(model, Mesh(comm, [("dp", comm.size)]), stage, meter,
                           prefetch=o.get("prefetch", False), algo=o["algo"], reuse_world=True)
        self.engine = dimension(model, "zero").engine
        meter.exclude(list(model.parameters()) + self.engine.shards)
        super().__init__(ctx, model, make_optimizer(self.engine.shards, cfg), shard=comm.rank,
                         shards=comm.size, holds_state=False, meter=meter)
        self.resumed_from = None
        if _rank_locks(o, comm):  # one run per save_dir at a time
            run_lock.lock(o["save_dir"])
        # the checkpoint the parent verified before spawn (`check_resume`: the same rule)
        if o["resume"] and (path := checkpoint_integrity.latest(o["save_dir"], deep=True)) is not None:
            saved = ckpt_mod.Checkpoint(path)
            ckpt_mod.load_into(saved, self.engine.units, self.optimizer, comm.size, comm.rank)
            self.first_step, self.resumed_from = saved.steps_done, saved.world_size
            # the parent sums the ranks' shares: rank 0 carries the resumed losses
            self.initial_losses = [x if comm.rank == 0 else 0.0 for x in saved.losses()]
        if o["resume_from"] is not None:
            shapes = {name: shape for unit in self.engine.units for name, shape in unit.layout.params}
            saved = dcp_format.TorchCheckpoint(o["resume_from"], shapes)
            steps, losses = dcp_format.load_into(saved, self.engine.units, self.optimizer,
                                                 comm.size, comm.rank)
            self.first_step = steps
            # rank 0 carries the resumed losses; NaN where the checkpoint does not record them
            known = losses if losses is not None else [float("nan")] * steps
            self.initial_losses = [x if comm.rank == 0 else 0.0 for x in known]
        self.losses = list(self.initial_losses)

    def forward_backward(self, step: int, batch) -> float:
        o = self.ctx.cfg.options
        if o["fail_at_step"] == step and o["fail_rank"] == self.ctx.rank:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash: no exception, no goodbye
        self.engine.start_step()
        share = super().forward_backward(step, batch)
        self.losses.append(share)
        return share

    def sync(self, step: int) -> None:
        self.engine.end_backward()

    def update(self, step: int) -> None:
        with self.ctx.span("optimizer", step=step):
            self.optimizer.step()
        self.engine.after_step()
        self.observe_memory()
        self.engine.zero_grad()

    def after_step(self, step: int) -> None:
        o = self.ctx.cfg.options
        if o["save_every"] and (step + 1) % o["save_every"] == 0:
            with self.ctx.span("checkpoint"):
                ckpt_mod.save(o["save_dir"], self.ctx.comm, step + 1,
                              [u.layout for u in self.engine.units], self.engine.shards,
                              self.optimizer, self.losses, self.ctx.cfg.scheme, self.model)

    def finish(self) -> None:
        if _rank_locks(self.ctx.cfg.options, self.ctx.comm):
            run_lock.unlock(self.ctx.cfg.options["save_dir"])

    def memory(self) -> dict:
        return self.engine.memory(self.optimizer)

    def extras(self) -> dict:
        masters = self.masters[0].masters if self.masters else {}  # mixed precision: fp32 masters
        return {"shards": {u.name: masters.get(u.shard, u.shard).detach().clone()
                           for u in self.engine.units},
                "layouts": [u.layout.to_meta() for u in self.engine.units],
                "resumed_from": self.resumed_from, "first_step": self.first_step,
                "stage": self.engine.stage}  # the memory formulas' stage (`explore.stage_of`)


def train_stage(ctx, stage: int):
    """Train with ZeRO `stage` (1, 2 or 3) on the one loop."""
    return loop.train(ctx, Zero(ctx, stage))


_REGISTER = dict(exact=True, options=OPTIONS, validate=validate, assemble=assemble, hold=hold,
                 precisions=tuple(PRECISIONS))


@register("zero1", shapes=True, summary="ZeRO-1: Adam moments sharded; grads reduce-scattered, params "
          "all-gathered", cost=partial(predict, 1), **_REGISTER)
def zero1(ctx):
    return train_stage(ctx, 1)


@register("zero2", shapes=True, summary="ZeRO-2: + gradients sharded as soon as each block's are ready",
          cost=partial(predict, 2), **_REGISTER)
def zero2(ctx):
    return train_stage(ctx, 2)


@register("zero3", shapes=True, summary="ZeRO-3 / FSDP: + parameters sharded, gathered per block for forward "
          "and backward", cost=partial(predict, 3), **{**_REGISTER, "options": ZERO3_OPTIONS})
def zero3(ctx):
    return train_stage(ctx, 3)



