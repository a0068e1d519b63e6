"""Pipeline parallelism: the model's layers cut into stages on p ranks, micro-batches flowing through.

One scheme per schedule — `pp-naive`, `pp-gpipe` (Huang et al., NeurIPS 2019), `pp-1f1b`
(PipeDream-Flush: Narayanan et al., ICML 2021), `pp-interleaved` (Megatron-LM: Narayanan et al.,
SC 2021), `pp-zb` (ZB-H1: Qi et al., ICLR 2024), `pp-eager-1f1b` (AlpaComm: Zhuang et al., MLSys
2023) — and `pp` with `schedule=` (also `pp-reshard`: `schemes_reshard`; `pp-dualpipe`:
`schemes_dualpipe`). The schedule is data (`parlab.pipeline.schedules`), validated, then executed
(`parlab.pipeline.executor`); what differs between models is their `StagedModel`
(`parlab.pipeline.stages.staged_model`), never branched on here. With world_size = dp × pp each
replica's last stage averages its loss over micro-batches (gradients equal the reference's), the
tied embedding's two copies are summed ("embed-tie"), then every gradient is averaged over dp
("grad-sync"). In full: docs/pipeline.md, `parlab.pipeline.schemes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from parlab.core.checks import Choice, Int
from parlab.core.memory import ActivationMeter
from parlab.core.mesh import Mesh, validate_degrees
from parlab.engine.loop import Strategy, build_model, make_optimizer, micro_batches, train
from parlab.engine.runner import register
from parlab.pipeline import cost as pp_cost
from parlab.pipeline import stages as stages_mod
from parlab.pipeline import unet_executor  # noqa: F401  registers the U-Net's StagedModel
from parlab.pipeline.schedules import GENERATORS, make_schedule
from parlab.pipeline.split import split_pp
from parlab.pipeline.stages import STAGED, staged_model
from parlab.pipeline.validate import check


@dataclass(frozen=True)
class PipelinePlan:
    """A configuration resolved: degrees, micro-batches, chunks, schedule, layers per stage."""

    schedule: str
    dp: int
    pp: int
    microbatches: int
    chunks: int
    partition: object  # "even" | "balanced" | "lamp" | tuple of layers per stage
    n_layers: int


def n_layers(cfg) -> int:
    """The layers the run's model cuts into stages (its `StagedModel`)."""
    return staged_model(cfg.model).n_layers(cfg.model_config)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def resolve(cfg, schedule: str) -> PipelinePlan:
    """Fill in defaults and check everything; ValueError names each offending value."""
    o, layers, world = cfg.options, n_layers(cfg), cfg.world_size
    if schedule not in GENERATORS:
        raise ValueError(f"schedule={schedule!r} is unknown; choose one of {sorted(GENERATORS)}")
    chunks = o.get("chunks", 1) if schedule in CHUNKED else 1  # typed by the registry
    pp = o.get("pp")
    if pp is None:  # the deepest pipeline that fits the layers
        pp = max(d for d in range(1, world + 1) if world % d == 0 and d * chunks <= layers or d == 1)
    degrees = validate_degrees(world, dp=None, pp=pp)
    dp = degrees["dp"]
    if pp * chunks > layers:
        raise ValueError(f"pp={pp} × chunks={chunks} = {pp * chunks} stages > {layers} layers "
                         f"(model={cfg.model!r}, {layers} layers): more stages "
                         "than layers")
    if cfg.batch_size % dp:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by dp={dp} "
                         f"(world_size={world} / pp={pp})")
    rows = cfg.batch_size // dp
    step = pp if schedule == "interleaved" else 1
    m = 1 if schedule == "naive" else o.get("microbatches")
    if m is None:  # the fewest that fill the pipeline: the smallest divisor of the rows >= pp
        choices = [k for k in range(step, rows + 1, step) if rows % k == 0 and k >= pp]
        m = choices[0] if choices else rows
    if rows % m:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by dp={dp} × "
                         f"microbatches={m} (equal micro-batches keep the loss the global mean)")
    if schedule == "interleaved" and m % pp:
        raise ValueError(f"schedule 'interleaved' needs microbatches={m} to be a multiple of "
                         f"pp={pp} (it sends micro-batches through the chunks in groups of pp)")
    part = o.get("partition", "even")
    if isinstance(part, (list, tuple)):
        part = tuple(part)
        if len(part) != pp * chunks or not all(_is_int(c) and c >= 1 for c in part) \
                or sum(part) != layers:
            raise ValueError(f"partition={list(part)} must give each of the {pp * chunks} stages "
                             f">= 1 layer, {layers} layers in all")
    elif part not in ("even", "balanced", "lamp"):
        raise ValueError(f"partition={part!r} must be 'even', 'balanced' (by time), 'lamp' (the "
                         "U-Net by memory) or a list of layer counts per stage")
    if part == "lamp" and not staged_model(cfg.model).by_memory:
        raise ValueError(f"partition='lamp' balances the U-Net's layers by memory (LAMP); with "
                         f"model={cfg.model!r} give 'even', 'balanced' or a list")
    return PipelinePlan(schedule, dp, pp, m, chunks, part, layers)


def _counts(ctx, plan: PipelinePlan, model) -> list[int]:
    """Layers per stage; 'balanced' (by time) and 'lamp' (the U-Net by memory: `pipeline.lamp`)
    profile on world rank 0 and broadcast the split."""
    stages = plan.pp * plan.chunks
    if isinstance(plan.partition, tuple):
        return list(plan.partition)
    if plan.partition == "even":
        return stages_mod.even_partition(plan.n_layers, stages)
    counts = torch.zeros(stages, dtype=torch.long)
    if ctx.rank == 0:
        rows = ctx.cfg.batch_size // (plan.dp * plan.microbatches)
        mc, kind = ctx.cfg.model_config, staged_model(ctx.cfg.model)
        if plan.partition == "lamp":
            in_flight = [pp_cost.in_flight_peak(plan.schedule, plan.pp, plan.microbatches, s)
                         for s in range(stages)]
            split = kind.memory_split(model, mc, rows, stages, in_flight, ctx.cfg.optimizer)
        else:
            split = kind.time_split(model, mc, rows, stages)
        counts = torch.tensor(split)
    with ctx.ledger.label(phase="partition"):
        ctx.comm.broadcast(counts, src=0)  # (stages,) layers per stage, from rank 0
    return counts.tolist()


class PipelineStages(Strategy):
    """What every pipeline shares around its schedule: the dp × pp mesh, this rank's stages cut
    from the reference model by `split_pp` (the planner's cut too), and after the schedule the
    tied embedding's two gradients summed (first and last stage, as Megatron does), every
    gradient averaged over dp, one update."""

    placement = "loop"  # stages on the pipeline ranks: a loop (chunks) or a V (DualPipe)

    def __init__(self, ctx, plan: PipelinePlan, schedule=None):
        self.plan, self.kind = plan, staged_model(ctx.cfg.model)  # what the model gives the pipeline
        self.mesh = mesh = Mesh(ctx.comm, [("dp", plan.dp), ("pp", plan.pp)])
        model = build_model(ctx.cfg)
        self.counts = _counts(ctx, plan, model)  # even, balanced (profiled on rank 0) or given
        schedule = schedule or make_schedule(plan.schedule, plan.pp, plan.microbatches, plan.chunks)
        self.parts = split_pp(model, mesh, schedule, plan.microbatches, chunks=plan.chunks,
                              counts=self.counts, placement=self.placement,
                              staged=self.kind).pipeline
        self.stage_ids, self.stages = self.parts.stage_ids, self.parts.stages
        self.tie_comm = self.parts.tie_comm
        self.params = list(model.parameters())  # this rank's kept parameters
        self.tied = stages_mod.tied_parameter(model)
        super().__init__(ctx, model, make_optimizer(self.params, ctx.cfg),
                         shard=mesh.coords["dp"], shards=plan.dp, reports_loss=self.parts.last)
        if self.scaler is not None:  # fp16-mixed: the last stage's loss scales its gradient
            for stage in self.stages.values():
                stage.loss = self.scaler.wrap_loss(stage.loss)

    def sync(self, step: int) -> None:
        if self.tied is not None and self.tie_comm.size > 1:
            with self.ctx.ledger.label(phase="embed-tie"):
                self.tie_comm.all_reduce(self.tied.grad, op="sum")  # (vocab, C) first + last
        if self.plan.dp > 1:
            with self.ctx.ledger.label(phase="grad-sync"):
                for p in self.params:
                    self.mesh["dp"].all_reduce(p.grad, op="avg")  # (param shape,) over dp

    def extras(self) -> dict:
        return {"stages": self.stage_ids, "layers_per_stage": self.counts,
                "param_numels": [p.numel() for p in self.params]}


class Pipeline(PipelineStages):
    """Our executor runs the schedule (data: per-rank F/B/W actions) action by action, with the
    model's per-stage strategy (`StagedModel.strategy`): the default for the GPT and the MLP; for
    the 3-D U-Net (`parlab.pipeline.unet_stages`) the main path on the pipeline's channels and every
    skip connection straight from its producer stage to its consumer stage on its own channels
    ("pp-skip" forward, "pp-skip-bwd" backward) — LAMP's setting (Zhu et al., MICCAI 2020;
    `parlab.pipeline.unet_executor.UNetSkips`)."""

    def __init__(self, ctx, schedule_name: str):
        super().__init__(ctx, resolve(ctx.cfg, schedule_name))
        strategy = self.kind.strategy(ctx, self.mesh.groups("pp"), self.stages)  # None: default
        self.meter = ActivationMeter(exclude=self.params)
        mc = ctx.cfg.model_config
        self.executor = self.parts.executor(ctx, self.mesh.coords["pp"],
                                            lambda rows: self.kind.boundary_shape(mc, rows),
                                            self.meter, strategy)

    def forward_backward(self, step: int, batch) -> float:
        # the U-Net's: m × (B/(dp·m), 1, S, S, S) volumes, m × (B/(dp·m), S, S, S) labels
        xs, ys = zip(*micro_batches(batch, self.plan.microbatches))  # m × (B/(dp·m), T)
        mb_losses = self.executor.run_step(step, xs, ys)
        return sum(mb_losses) / self.plan.microbatches / self.plan.dp if self.reports_loss else 0.0

    def extras(self) -> dict:
        return {**super().extras(), "in_flight_peak": self.executor.in_flight_peak,
                "microbatch_activations": sum(self.executor.microbatch_bytes.values()),
                "stage_activations": dict(self.executor.microbatch_bytes),
                **self.kind.extras(self.ctx.cfg.model_config, self.counts)}


def check_model(cfg, schedule: str) -> None:
    """ValueError for a schedule the run's model does not run (before any process starts)."""
    kind = staged_model(cfg.model)
    if not kind.runs(schedule):
        raise ValueError(f"schedule={schedule!r} with model={cfg.model!r}: the {kind.title} "
                         f"pipeline runs one of {kind.schedules}")


def assemble(outputs: list, cfg) -> dict:
    """The full state: the union of the stages' parameters (the tied copies are equal)."""
    state = {}
    for out in outputs:
        state.update(out.state or {})
    return state


CHUNKED = ("interleaved", "looped-bfs")  # the schedules with v chunks per rank (loop placement)

SUMMARIES = {
    "naive": "plain model parallelism: one micro-batch, stages idle in turn",
    "gpipe": "GPipe: all forwards, then all backwards, m micro-batches",
    "1f1b": "1F1B (PipeDream-Flush): one forward, one backward; <= p micro-batches in flight",
    "interleaved": "Megatron interleaved 1F1B: v chunks per rank, bubble / v",
    "zb": "zero bubble ZB-H1: backward split into B (input) and W (weight), W fills bubbles",
    "eager-1f1b": "AlpaComm eager 1F1B: 2(p-s-1) warm-up forwards so sends overlap compute; "
                  "<= 2(p-s)-1 micro-batches in flight",
    "looped-bfs": "looped breadth-first (Lamy-Poirier 2023): v chunks per rank, every micro-batch "
                  "through one chunk before the next; bubble / v, GPipe's memory",
}


RESHARD_SCHEDULES = tuple(s for s in SUMMARIES if s not in CHUNKED)  # one stage per mesh


def stage_options() -> dict:
    """The options every pipeline scheme takes: its degree, its partition and its micro-batches
    (None: the fewest that fill it)."""
    return {"pp": Int(None, min=1, none=True), "partition": "even",
            "microbatches": Int(None, min=1, none=True)}


def _register(name: str, schedule: str | None) -> None:
    options = stage_options()
    if schedule == "naive":
        del options["microbatches"]  # one micro-batch: the naive schedule's own
    if schedule in (*CHUNKED, None):
        options["chunks"] = Int(2, min=1)  # model chunks per rank (interleaved, looped-bfs)
    if schedule is None:
        options["schedule"] = Choice("1f1b", tuple(SUMMARIES))

    def chosen(cfg):
        return schedule or cfg.options["schedule"]

    def validate(cfg):
        check_model(cfg, chosen(cfg))
        plan = resolve(cfg, chosen(cfg))
        check(make_schedule(plan.schedule, plan.pp, plan.microbatches, plan.chunks))

    def worker(ctx):
        return train(ctx, Pipeline(ctx, chosen(ctx.cfg)))

    worker.__name__ = worker.__qualname__ = f"pipeline_{schedule or 'any'}"
    summary = SUMMARIES[schedule] if schedule else "pipeline with schedule= any of " + ", ".join(
        SUMMARIES)
    models = tuple(name for name, kind in STAGED.items() if kind.runs(schedule))
    # mixed precision: the executor's boundary buffers take the compute dtype, and with fp16 the
    # last stage's loss carries the loop's loss scale (PipelineStages)
    register(name, summary=summary, exact=True, options=options, validate=validate,
             assemble=assemble, models=models,
             precisions=("fp32", "bf16-mixed", "fp16-mixed"), shapes=True)(worker)


for _schedule in SUMMARIES:
    _register(f"pp-{_schedule}", _schedule)
_register("pp", None)
