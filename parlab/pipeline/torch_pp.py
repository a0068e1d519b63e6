"""`torch-pp`: PyTorch's own pipeline (`torch.distributed.pipelining`) on the same stages, for
comparison with ours.

Each rank wraps its `parlab.pipeline.stages.Stage` (cut from the reference model exactly as ours)
in a `PipelineStage` and runs `ScheduleGPipe` or `Schedule1F1B` (`schedule="gpipe" | "1f1b"`) over
`microbatches` micro-batches; the schedule averages gradients over micro-batches (`scale_grads`),
which is the reference's global mean. The tied embedding's copies are summed and gradients are
averaged over dp through `parlab.core.comm` as in ours.

Bytes: the activations and gradients PyTorch sends between stages go through its own
`batch_isend_irecv`, so they cannot be observed; the ledger holds them as nominal sends
(`nominal=True`, the size of ours: `parlab.pipeline.cost.p2p_bytes_per_step`) beside the
embed-tie and dp all-reduces, which go through `Comm`.
Timeline: PyTorch runs the schedule inside `schedule.step`, so a step is one "pipeline" span;
compare throughput, not per-action Gantt charts.
"""

from __future__ import annotations

import time

import torch

from parlab.core.checks import Choice, Int
from parlab.engine.loop import train
from parlab.engine.runner import register
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.schemes import PipelineStages, assemble, resolve

SCHEDULES = ("gpipe", "1f1b")


def _validate(cfg):
    plan = resolve(cfg, cfg.options["schedule"])
    if cfg.options["schedule"] == "1f1b" and plan.microbatches < plan.pp:
        raise ValueError(f"torch's Schedule1F1B needs microbatches={plan.microbatches} >= "
                         f"pp={plan.pp}")


class TorchPipeline(PipelineStages):
    """PyTorch's schedule runs inside `schedule.step`: one "pipeline" span per step. Its stage
    messages go through its own `batch_isend_irecv`: recorded as nominal sends (one activation
    per micro-batch forward, one gradient back, `parlab.pipeline.cost.p2p_bytes_per_step`)."""

    def __init__(self, ctx):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        plan = resolve(ctx.cfg, ctx.cfg.options["schedule"])
        super().__init__(ctx, plan)
        pp_rank = self.mesh.coords["pp"]
        self.stage = self.stages[pp_rank]
        pipe_stage = PipelineStage(self.stage, pp_rank, plan.pp, torch.device("cpu"),
                                   group=self.mesh["pp"].group)
        kind = ScheduleGPipe if ctx.cfg.options["schedule"] == "gpipe" else Schedule1F1B
        self.schedule = kind(pipe_stage, plan.microbatches, loss_fn=self.stage.loss)

    def forward_backward(self, step: int, batch) -> float:
        x, y = batch  # (B/dp, T) each
        mb_losses: list = []
        t0 = time.perf_counter()
        with self.ctx.span("pipeline", step=step):
            if self.stage.first:
                self.schedule.step(x)
            elif self.stage.last:
                self.schedule.step(target=y, losses=mb_losses)
            else:
                self.schedule.step()
        self._record_messages(x.size(0) // self.plan.microbatches, t0)
        if not self.stage.last:
            return 0.0
        return sum(v.item() for v in mb_losses) / self.plan.microbatches / self.plan.dp

    def _record_messages(self, rows: int, t0: float) -> None:
        """Nominal: what torch.distributed.pipelining sent this step (it bypasses `Comm`)."""
        comm, pp_rank, m = self.mesh["pp"], self.mesh.coords["pp"], self.plan.microbatches
        boundary = torch.empty(stages_mod.boundary_shape(self.ctx.cfg.model_config, rows))
        with self.ctx.ledger.label(phase="pp"):
            for _ in range(m):
                if not self.stage.last:  # activation forward to the next stage
                    comm.record_nominal("send", boundary, algo="torch-pp", t_start=t0,
                                        sent=boundary.numel(), recv=0, peers={pp_rank + 1})
                if not self.stage.first:  # gradient back to the previous stage
                    comm.record_nominal("send", boundary, algo="torch-pp", t_start=t0,
                                        sent=boundary.numel(), recv=0, peers={pp_rank - 1})


@register("torch-pp", summary="torch.distributed.pipelining (ScheduleGPipe / Schedule1F1B)",
          exact=True, options={"pp": Int(None, min=1, none=True),
                               "microbatches": Int(None, min=1, none=True),
                               "schedule": Choice("1f1b", SCHEDULES), "partition": "even"},
          validate=_validate, assemble=assemble)
def torch_pp(ctx):
    return train(ctx, TorchPipeline(ctx))
