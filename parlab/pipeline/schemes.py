"""Pipeline parallelism: the model's layers cut into stages on p ranks, micro-batches flowing through.

One scheme per schedule — `pp-naive` (plain model parallelism), `pp-gpipe` (Huang et al.,
NeurIPS 2019), `pp-1f1b` (PipeDream-Flush: Narayanan et al., ICML 2021), `pp-interleaved`
(Megatron-LM: Narayanan et al., SC 2021), `pp-zb` (ZB-H1: Qi et al., ICLR 2024) — and `pp` with
`schedule=` to pick any of them. The schedule is data (`parlab.pipeline.schedules`), validated
before it runs and executed action by action (`parlab.pipeline.executor`).

With world_size = dp × pp the pipeline is replicated dp times (mesh ("dp", "pp"), pp innermost);
each replica trains on its rows of the global batch, cut into m equal micro-batches. The last
stage's loss is the mean over micro-batches, so gradients equal the reference's; the tied
embedding's two copies (first and last stage) are summed ("embed-tie"), then every gradient is
averaged over dp ("grad-sync"), then each rank steps the optimizer on its own parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from parlab.core.memory import ActivationMeter, model_memory
from parlab.core.mesh import Mesh, validate_degrees
from parlab.engine.loop import build_model, make_optimizer, state_of, step_batch
from parlab.engine.runner import register
from parlab.pipeline import partition as partition_mod
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.executor import PipelineExecutor
from parlab.pipeline.schedules import GENERATORS, make_schedule
from parlab.pipeline.validate import check


@dataclass(frozen=True)
class Plan:
    """A configuration resolved: degrees, micro-batches, chunks, schedule, layers per stage."""

    schedule: str
    dp: int
    pp: int
    microbatches: int
    chunks: int
    partition: object  # "even" | "balanced" | tuple of layers per stage
    n_layers: int


def n_layers(cfg) -> int:
    mc = cfg.model_config
    return mc.n_layer if cfg.model == "gpt" else mc.n_layer + 1  # the MLP has n_layer+1 linears


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def resolve(cfg, schedule: str) -> Plan:
    """Fill in defaults and check everything; ValueError names each offending value."""
    o, layers, world = cfg.options, n_layers(cfg), cfg.world_size
    if schedule not in GENERATORS:
        raise ValueError(f"schedule={schedule!r} is unknown; choose one of {sorted(GENERATORS)}")
    chunks = o.get("chunks", 1) if schedule == "interleaved" else 1
    if not _is_int(chunks) or chunks < 1:
        raise ValueError(f"chunks={chunks!r} must be an int >= 1")
    pp = o.get("pp")
    if pp is None:  # the deepest pipeline that fits the layers
        pp = max(d for d in range(1, world + 1) if world % d == 0 and d * chunks <= layers or d == 1)
    degrees = validate_degrees(world, dp=None, pp=pp)
    dp = degrees["dp"]
    if pp * chunks > layers:
        raise ValueError(f"pp={pp} × chunks={chunks} = {pp * chunks} stages > {layers} layers "
                         f"(model={cfg.model!r}, n_layer={cfg.model_config.n_layer}): more stages "
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
    if not _is_int(m) or m < 1:
        raise ValueError(f"microbatches={m!r} must be an int >= 1")
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
    elif part not in ("even", "balanced"):
        raise ValueError(f"partition={part!r} must be 'even', 'balanced' or a list of layer "
                         "counts per stage")
    return Plan(schedule, dp, pp, m, chunks, part, layers)


def _counts(ctx, plan: Plan, model) -> list[int]:
    """Layers per stage; 'balanced' profiles on world rank 0 and broadcasts the split."""
    stages = plan.pp * plan.chunks
    if isinstance(plan.partition, tuple):
        return list(plan.partition)
    if plan.partition == "even":
        return stages_mod.even_partition(plan.n_layers, stages)
    counts = torch.zeros(stages, dtype=torch.long)
    if ctx.rank == 0:
        rows = ctx.cfg.batch_size // (plan.dp * plan.microbatches)
        profile = partition_mod.profile_layers(model, ctx.cfg.model_config, rows)
        counts = torch.tensor(partition_mod.balanced_partition(profile, stages))
    with ctx.ledger.label(phase="partition"):
        ctx.comm.broadcast(counts, src=0)  # (stages,) layers per stage, from rank 0
    return counts.tolist()


def pipeline_worker(ctx, schedule_name: str) -> dict:
    cfg = ctx.cfg
    plan = resolve(cfg, schedule_name)
    schedule = check(make_schedule(schedule_name, plan.pp, plan.microbatches, plan.chunks))
    mesh = Mesh(ctx.comm, [("dp", plan.dp), ("pp", plan.pp)])
    dp_rank, pp_rank = mesh.coords["dp"], mesh.coords["pp"]
    comm_f = mesh["pp"]  # activations forward
    comm_b = ctx.comm.split(mesh.groups("pp"), "pp-bwd")  # gradients back: a second FIFO channel
    ends = {mesh.rank_of(dp=d, pp=0) for d in range(plan.dp)} | {
        mesh.rank_of(dp=d, pp=plan.pp - 1) for d in range(plan.dp)}
    tie_groups = [[mesh.rank_of(dp=d, pp=0), mesh.rank_of(dp=d, pp=plan.pp - 1)]
                  for d in range(plan.dp)] + [[r] for r in range(ctx.world_size) if r not in ends]
    tie_comm = ctx.comm.split([sorted(set(g)) for g in tie_groups], "embed-tie")

    model = build_model(cfg)
    counts = _counts(ctx, plan, model)
    stage_ids = [c * plan.pp + pp_rank for c in range(plan.chunks)]
    stages = stages_mod.build_stages(model, stage_ids, counts)
    params = list(model.parameters())  # this rank's kept parameters
    tied = stages_mod.tied_parameter(model)
    optimizer = make_optimizer(params, cfg)
    meter = ActivationMeter(exclude=params)
    executor = PipelineExecutor(
        ctx, schedule, pp_rank, stages, comm_f, comm_b,
        lambda rows: stages_mod.boundary_shape(cfg.model_config, rows), meter)
    holds_loss = schedule.stages - 1 in stage_ids
    losses, memory = [], {}
    for step in range(cfg.steps):
        with ctx.step(step):
            x, y = step_batch(cfg, step, dp_rank, plan.dp)  # (B/dp, T) each
            xs, ys = x.chunk(plan.microbatches), y.chunk(plan.microbatches)  # m × (B/(dp·m), T)
            mb_losses = executor.run_step(step, list(xs), list(ys))
            memory = finish_step(ctx, plan, mesh, tied, tie_comm, params, optimizer)
            if holds_loss:
                losses.append(sum(mb_losses) / plan.microbatches / plan.dp)
    memory.update(activations=meter.peak, in_flight_peak=executor.in_flight_peak,
                  microbatch_activations=sum(executor.microbatch_bytes.values()),
                  stages=stage_ids, layers_per_stage=counts,
                  param_numels=[p.numel() for p in params])
    return {"losses": losses if holds_loss else None,
            "state": state_of(model) if dp_rank == 0 else None, "memory": memory}


def finish_step(ctx, plan, mesh, tied, tie_comm, params, optimizer) -> dict:
    """After a step's schedule: sum the tied embedding's two gradients (first and last stage, as
    Megatron does), average gradients over dp, update; return the measured memory."""
    if tied is not None and tie_comm.size > 1:
        with ctx.ledger.label(phase="embed-tie"):
            tie_comm.all_reduce(tied.grad, op="sum")  # (vocab, C) first + last stage
    if plan.dp > 1:
        with ctx.ledger.label(phase="grad-sync"):
            for p in params:
                mesh["dp"].all_reduce(p.grad, op="avg")  # (param shape,) over dp
    with ctx.span("optimizer"):
        optimizer.step()
    memory = model_memory(params, optimizer)
    optimizer.zero_grad(set_to_none=True)
    return memory


def assemble(outputs: list[dict], cfg) -> dict:
    """The full state: the union of the stages' parameters (the tied copies are equal)."""
    state = {}
    for out in outputs:
        state.update(out.get("state") or {})
    return state


SUMMARIES = {
    "naive": "plain model parallelism: one micro-batch, stages idle in turn",
    "gpipe": "GPipe: all forwards, then all backwards, m micro-batches",
    "1f1b": "1F1B (PipeDream-Flush): one forward, one backward; <= p micro-batches in flight",
    "interleaved": "Megatron interleaved 1F1B: v chunks per rank, bubble / v",
    "zb": "zero bubble ZB-H1: backward split into B (input) and W (weight), W fills bubbles",
}


def _register(name: str, schedule: str | None) -> None:
    options = {"pp": None, "partition": "even"}
    if schedule != "naive":
        options["microbatches"] = None
    if schedule in ("interleaved", None):
        options["chunks"] = 2
    if schedule is None:
        options["schedule"] = "1f1b"

    def chosen(cfg):
        return schedule or cfg.options["schedule"]

    def validate(cfg):
        plan = resolve(cfg, chosen(cfg))
        check(make_schedule(plan.schedule, plan.pp, plan.microbatches, plan.chunks))

    def worker(ctx):
        return pipeline_worker(ctx, chosen(ctx.cfg))

    worker.__name__ = worker.__qualname__ = f"pipeline_{schedule or 'any'}"
    summary = SUMMARIES[schedule] if schedule else "pipeline with schedule= any of " + ", ".join(
        SUMMARIES)
    register(name, summary=summary, exact=True, options=options, validate=validate,
             assemble=assemble)(worker)


for _schedule in SUMMARIES:
    _register(f"pp-{_schedule}", _schedule)
_register("pp", None)
