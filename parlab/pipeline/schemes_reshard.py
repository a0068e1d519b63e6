"""`pp-reshard`: a pipeline whose stages are meshes of replicas — the replicated layout a
tensor-parallel block leaves — and whose boundaries are cross-mesh reshardings (AlpaComm: Zhuang
et al., "On Optimizing the Communication of Model Parallelism", MLSys 2023, §3–4).

`mesh=w` puts every stage on w replicas; `widths=[2, 1]` gives each stage its own width, e.g. a
tp=2 stage's output resharded onto a tp=1 stage and its gradient back. Every boundary is a
`parlab.pipeline.reshard_boundary.Boundary` (send-recv, broadcast, our even split or AlpaComm's
load-balanced broadcast of whole tiles, the link applied at the sender), and the schedule runs
unchanged on it (`parlab.pipeline.executor`). The replicas compute the same micro-batches, so
their gradients are equal and need no sync.
"""

from __future__ import annotations

import dataclasses

from parlab.core.checks import Choice, Int
from parlab.core.comm import Comm
from parlab.core.memory import ActivationMeter
from parlab.engine.loop import Strategy, build_model, make_optimizer, micro_batches, train
from parlab.engine.runner import register
from parlab.pipeline import reshard_boundary
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.executor import PipelineExecutor
from parlab.pipeline.schedules import make_schedule
from parlab.pipeline.schemes import (
    RESHARD_SCHEDULES,
    PipelinePlan,
    PipelineStages,
    _is_int,
    assemble,
    resolve,
    stage_options,
)
from parlab.pipeline.validate import check
from parlab.tensor_parallel.reshard import ALIASES, METHODS


def boundary_channels(ctx, pp: int, widths, stage: int) -> dict:
    """This rank's forward ("F") and backward ("B") boundaries: for each boundary k next to
    `stage`, a sending and a receiving Comm on the group of the two meshes it joins (even and odd
    boundaries in separate groups, so a stage talks to both neighbours at once). `widths`: one
    width for every stage, or a list."""
    o = ctx.cfg.options
    even, odd = reshard_boundary.boundary_groups(pp, widths)
    channels = {}
    for kind in ("F", "B"):
        comms = {}
        for parity, groups in enumerate((even, odd)):
            tx = ctx.comm.split(groups, f"pp-{kind}{parity}")
            # paced: the Comms price the link on the board; wall clock: the boundary applies it
            # at the sender (reshard_boundary.SenderLink)
            tx.link = tx.link if tx.virtual else None
            rx = Comm(tx.group, ledger=ctx.ledger, timeline=ctx.comm.timeline, link=tx.link,
                      name=f"pp-{kind}{parity}-rx", shares_posts_with=tx)  # the receive side
            for k in (stage - 1, stage):
                if 0 <= k < pp - 1 and k % 2 == parity:
                    comms[k] = (tx, rx)
        channels[kind] = reshard_boundary.Boundary(kind, comms, pp, widths, o["method"],
                                               ctx.cfg.link, o["chunks"])
    return channels


class ReshardPipeline(PipelineStages):
    """Every stage on a mesh of `mesh` replicas (the replicated layout a tensor-parallel block
    leaves), every boundary a cross-mesh resharding by `method` (`parlab.pipeline.reshard_boundary`):
    AlpaComm's setting (Zhuang et al., MLSys 2023). The replicas compute the same micro-batches,
    so their gradients are equal and need no sync; member 0 of the last mesh reports the loss."""

    def __init__(self, ctx, schedule_name: str):
        width = ctx.cfg.options["mesh"]
        plan = reshard_plan(ctx.cfg, schedule_name)
        super().__init__(ctx, plan)
        self.shard, self.shards = 0, 1  # every replica trains on the pipeline's whole batch
        self.member = self.mesh.coords["dp"]
        self.reports_loss = self.reports_loss and self.member == 0
        stage = self.mesh.coords["pp"]
        channels = boundary_channels(ctx, plan.pp, width, stage)
        self.meter = ActivationMeter(exclude=self.params)
        self.executor = PipelineExecutor(
            ctx, self.parts.schedule, stage, self.stages, channels["F"], channels["B"],
            lambda rows: stages_mod.boundary_shape(ctx.cfg.model_config, rows), self.meter)

    def sync(self, step: int) -> None:
        if self.tied is not None and self.tie_comm.size > 1:
            with self.ctx.ledger.label(phase="embed-tie"):
                self.tie_comm.all_reduce(self.tied.grad, op="sum")  # (vocab, C) first + last

    def forward_backward(self, step: int, batch) -> float:
        xs, ys = zip(*micro_batches(batch, self.plan.microbatches))  # m × (B/m, T): the whole batch
        mb_losses = self.executor.run_step(step, xs, ys)
        return sum(mb_losses) / self.plan.microbatches if self.reports_loss else 0.0

    def extras(self) -> dict:
        return {**super().extras(), "in_flight_peak": self.executor.in_flight_peak,
                "microbatch_activations": sum(self.executor.microbatch_bytes.values()),
                "member": self.member}


class WidthsPipeline(Strategy):
    """`pp-reshard` with `widths=`: stage s on a mesh of widths[s] replicas, e.g. [2, 1] — a tp=2
    stage's replicated output resharded onto a tp=1 stage and its gradient back (AlpaComm's
    cross-mesh resharding between meshes of different shapes: Zhuang et al., MLSys 2023, §3).
    Ranks: `reshard_boundary.stage_ranks`. Every replica trains on the whole batch; the tied embedding's
    gradient is each copy's share (÷ its stage's width) summed over both end meshes."""

    def __init__(self, ctx, schedule_name: str):
        cfg = ctx.cfg
        self.widths = widths = list(cfg.options["widths"])
        self.plan = plan = widths_plan(cfg, schedule_name)
        ranks = reshard_boundary.stage_ranks(widths)
        self.stage = stage = next(s for s, group in enumerate(ranks) if ctx.rank in group)
        self.member = ranks[stage].index(ctx.rank)
        ends = sorted(set(ranks[0] + ranks[-1]))
        self.tie_comm = ctx.comm.split([ends] + [[r] for r in range(ctx.world_size)
                                                 if r not in ends], "embed-tie")
        model = build_model(cfg)
        self.counts = (list(plan.partition) if isinstance(plan.partition, tuple)
                       else stages_mod.even_partition(plan.n_layers, plan.pp))
        self.stages = stages_mod.build_stages(model, [stage], self.counts)
        self.params = list(model.parameters())
        self.tied = stages_mod.tied_parameter(model)
        super().__init__(ctx, model, make_optimizer(self.params, cfg), shard=0, shards=1,
                         reports_loss=stage == plan.pp - 1 and self.member == 0, holds_state=True)
        channels = boundary_channels(ctx, plan.pp, widths, stage)
        schedule = check(make_schedule(schedule_name, plan.pp, plan.microbatches))
        self.meter = ActivationMeter(exclude=self.params)
        self.executor = PipelineExecutor(
            ctx, schedule, stage, self.stages, channels["F"], channels["B"],
            lambda rows: stages_mod.boundary_shape(cfg.model_config, rows), self.meter)

    def sync(self, step: int) -> None:
        if self.tied is not None and self.tie_comm.size > 1:
            with self.ctx.ledger.label(phase="embed-tie"):
                self.tied.grad.div_(self.widths[self.stage])  # each mesh's copies: one gradient
                self.tie_comm.all_reduce(self.tied.grad, op="sum")  # (vocab, C) over both ends

    def forward_backward(self, step: int, batch) -> float:
        xs, ys = zip(*micro_batches(batch, self.plan.microbatches))  # m × (B/m, T): the whole batch
        mb_losses = self.executor.run_step(step, xs, ys)
        return sum(mb_losses) / self.plan.microbatches if self.reports_loss else 0.0

    def extras(self) -> dict:
        return {"stages": [self.stage], "layers_per_stage": self.counts, "member": self.member,
                "widths": self.widths, "in_flight_peak": self.executor.in_flight_peak,
                "microbatch_activations": sum(self.executor.microbatch_bytes.values())}


def widths_plan(cfg, schedule: str) -> PipelinePlan:
    """The plan of `pp-reshard` with `widths=`; ValueError names what is wrong."""
    widths, world = cfg.options["widths"], cfg.world_size
    if not isinstance(widths, (list, tuple)) or len(widths) < 2 or not all(
            _is_int(w) and w >= 1 for w in widths):
        raise ValueError(f"widths={widths!r} must list >= 2 stages' ranks, each an int >= 1")
    if sum(widths) != world:
        raise ValueError(f"widths={list(widths)} sum to {sum(widths)}, not world_size={world}")
    pp = cfg.options.get("pp")
    if pp is not None and pp != len(widths):
        raise ValueError(f"pp={pp} != len(widths={list(widths)}) = {len(widths)}")
    if schedule not in RESHARD_SCHEDULES:
        raise ValueError(f"schedule={schedule!r}: pp-reshard runs one of {RESHARD_SCHEDULES}")
    # any model but gpt and mlp is refused by the registry (`register`'s default models)
    options = {**cfg.options, "pp": len(widths)}
    plan = resolve(dataclasses.replace(cfg, world_size=len(widths), options=options), schedule)
    return dataclasses.replace(plan, dp=1)


def reshard_plan(cfg, schedule: str) -> PipelinePlan:
    """The plan of `pp-reshard`: pp meshes of `mesh` replicas; ValueError names what is wrong."""
    width, world = cfg.options["mesh"], cfg.world_size
    if world % width:
        raise ValueError(f"world_size={world} is not divisible by mesh={width} (ranks per stage)")
    if schedule not in RESHARD_SCHEDULES:
        raise ValueError(f"schedule={schedule!r}: pp-reshard runs one of {RESHARD_SCHEDULES}")
    plan = resolve(dataclasses.replace(cfg, world_size=world // width), schedule)
    if plan.dp != 1 or plan.pp < 2:
        raise ValueError(f"pp={plan.pp} × mesh={width} must be world_size={world} with pp >= 2")
    return dataclasses.replace(plan, dp=width)


def _reshard_validate(cfg):
    if cfg.options.get("widths") is not None:
        plan = widths_plan(cfg, cfg.options["schedule"])
        check(make_schedule(plan.schedule, plan.pp, plan.microbatches))
        return
    plan = reshard_plan(cfg, cfg.options["schedule"])
    check(make_schedule(plan.schedule, plan.pp, plan.microbatches))


@register("pp-reshard", summary="pipeline whose stages are meshes of replicas and whose boundaries "
          "are cross-mesh reshardings (AlpaComm): send-recv, broadcast, even-split (ours) or "
          "alpacomm (whole tiles, least-loaded holder, searched order)",
          exact=True, validate=_reshard_validate, assemble=assemble,
          options={**stage_options(), "mesh": Int(2, min=1),
                   "method": Choice("broadcast", METHODS + tuple(ALIASES)), "chunks": Int(4, min=1),
                   "schedule": Choice("1f1b", RESHARD_SCHEDULES),
                   "widths": None})  # ranks per stage, e.g. [2, 1]: overrides mesh
def pipeline_reshard(ctx):
    if ctx.cfg.options.get("widths") is not None:
        return train(ctx, WidthsPipeline(ctx, ctx.cfg.options["schedule"]))
    return train(ctx, ReshardPipeline(ctx, ctx.cfg.options["schedule"]))
