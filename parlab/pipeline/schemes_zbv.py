"""`pp-zbv`: ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §6) on our executor;
the schedule is `parlab.pipeline.zbv`.

Pipeline rank r holds two stages in a V, r and 2p−1−r (`split_pp`'s "v" placement), cut from the
reference model like every pipeline's (`parlab.pipeline.stages`) into 2p stages: each stage half of
1F1B's, the same parameters per rank. Rank 0 holds the first and the last stage, so the GPT's tied
embedding's two uses accumulate into one tensor there (no "embed-tie" group); rank 0 reports the
loss. The backward is split (B: input gradient, W: weight gradient) as in `pp-zb`.
"""

from __future__ import annotations

import dataclasses

from parlab.core.memory import ActivationMeter
from parlab.engine.loop import train
from parlab.engine.runner import register
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.schemes import Pipeline, PipelinePlan, PipelineStages, assemble, resolve, stage_options
from parlab.pipeline.validate import check
from parlab.pipeline.zbv import zbv


def zbv_plan(cfg) -> PipelinePlan:
    """pp and m as every pipeline's (`schemes.resolve`, two chunks per rank); the schedule ZB-V."""
    options = {**cfg.options, "chunks": 2}
    plan = resolve(dataclasses.replace(cfg, options=options), "looped-bfs")  # 2p stages, any m
    return dataclasses.replace(plan, schedule="zbv")


class ZBVPipeline(Pipeline):
    """The ZB-V schedule on `PipelineExecutor`: two stages per rank in a V (module docstring)."""

    placement = "v"  # rank r holds stages r and 2p−1−r (split_pp)

    def __init__(self, ctx):
        plan = zbv_plan(ctx.cfg)
        PipelineStages.__init__(self, ctx, plan, zbv(plan.pp, plan.microbatches))
        self.meter = ActivationMeter(exclude=self.params)
        self.executor = self.parts.executor(
            ctx, self.mesh.coords["pp"],
            lambda rows: stages_mod.boundary_shape(ctx.cfg.model_config, rows), self.meter)


def _validate(cfg):
    plan = zbv_plan(cfg)
    check(zbv(plan.pp, plan.microbatches))


@register("pp-zbv", shapes=True, summary="ZB-V (Qi et al. 2024): two stages per rank in a V, "
          "backward split into B and W, W fills bubbles; 1F1B's memory",
          exact=True, validate=_validate, assemble=assemble,
          options=stage_options())
def pipeline_zbv(ctx):
    return train(ctx, ZBVPipeline(ctx))
