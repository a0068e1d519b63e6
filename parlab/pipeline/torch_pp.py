"""`torch-pp`: PyTorch's own pipeline (`torch.distributed.pipelining`) on the same stages, for
comparison with ours.

Each rank wraps its `parlab.pipeline.stages.Stage` (cut from the reference model exactly as ours)
in a `PipelineStage` and runs `ScheduleGPipe` or `Schedule1F1B` (`schedule="gpipe" | "1f1b"`) over
`microbatches` micro-batches; the schedule averages gradients over micro-batches (`scale_grads`),
which is the reference's global mean. The tied embedding's copies are summed and gradients are
averaged over dp through `parlab.core.comm` as in ours.

Bytes: the activations and gradients PyTorch sends between stages go through its own
`batch_isend_irecv`, so they are NOT in the ledger (only the embed-tie and dp all-reduces are).
Their size is the same as ours: `parlab.pipeline.cost.p2p_bytes_per_step`.
Timeline: PyTorch runs the schedule inside `schedule.step`, so a step is one "pipeline" span;
compare throughput, not per-action Gantt charts.
"""

from __future__ import annotations

import torch

from parlab.core.mesh import Mesh
from parlab.engine.loop import build_model, make_optimizer, state_of, step_batch
from parlab.engine.runner import register
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.schemes import _counts, assemble, finish_step, resolve

SCHEDULES = ("gpipe", "1f1b")


def _validate(cfg):
    if cfg.options["schedule"] not in SCHEDULES:
        raise ValueError(f"schedule={cfg.options['schedule']!r} must be one of {SCHEDULES} for "
                         "torch-pp")
    plan = resolve(cfg, cfg.options["schedule"])
    if cfg.options["schedule"] == "1f1b" and plan.microbatches < plan.pp:
        raise ValueError(f"torch's Schedule1F1B needs microbatches={plan.microbatches} >= "
                         f"pp={plan.pp}")


@register("torch-pp", summary="torch.distributed.pipelining (ScheduleGPipe / Schedule1F1B)",
          exact=True, options={"pp": None, "microbatches": None, "schedule": "1f1b",
                               "partition": "even"},
          validate=_validate, assemble=assemble)
def torch_pp(ctx):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    cfg = ctx.cfg
    plan = resolve(cfg, cfg.options["schedule"])
    mesh = Mesh(ctx.comm, [("dp", plan.dp), ("pp", plan.pp)])
    dp_rank, pp_rank = mesh.coords["dp"], mesh.coords["pp"]
    ends = [[mesh.rank_of(dp=d, pp=0), mesh.rank_of(dp=d, pp=plan.pp - 1)] for d in range(plan.dp)]
    flat = {r for g in ends for r in g}
    tie_comm = ctx.comm.split([sorted(set(g)) for g in ends] +
                              [[r] for r in range(ctx.world_size) if r not in flat], "embed-tie")
    model = build_model(cfg)
    counts = _counts(ctx, plan, model)  # even, balanced (profiled on rank 0) or given
    stage = stages_mod.build_stages(model, [pp_rank], counts)[pp_rank]
    params = list(model.parameters())
    tied = stages_mod.tied_parameter(model)
    optimizer = make_optimizer(params, cfg)
    pipe_stage = PipelineStage(stage, pp_rank, plan.pp, torch.device("cpu"), group=mesh["pp"].group)
    kind = ScheduleGPipe if cfg.options["schedule"] == "gpipe" else Schedule1F1B
    schedule = kind(pipe_stage, plan.microbatches, loss_fn=stage.loss)
    losses = []
    for step in range(cfg.steps):
        with ctx.step(step):
            x, y = step_batch(cfg, step, dp_rank, plan.dp)  # (B/dp, T) each
            mb_losses = []
            with ctx.span("pipeline", step=step):
                if stage.first:
                    schedule.step(x)
                elif stage.last:
                    schedule.step(target=y, losses=mb_losses)
                else:
                    schedule.step()
            memory = finish_step(ctx, plan, mesh, tied, tie_comm, params, optimizer)
            if stage.last:
                losses.append(sum(v.item() for v in mb_losses) / plan.microbatches / plan.dp)
    return {"losses": losses if stage.last else None,
            "state": state_of(model) if dp_rank == 0 else None, "memory": memory}
