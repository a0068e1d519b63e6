"""`pp-dualpipe`: DeepSeek-V3's bidirectional pipeline (DeepSeek-AI, "DeepSeek-V3 Technical
Report", arXiv 2412.19437, §3.2.1) on our executor; the schedule is `parlab.pipeline.dualpipe`.

Pipeline rank r holds two stages, r (of the direction fed at rank 0) and p−1−r (of the direction
fed at rank p−1), cut from the reference model like every pipeline's (`parlab.pipeline.stages`):
2× the parameters of 1F1B. Ranks r and p−1−r hold the same two stages, so after the schedule each
of their gradients is summed over the pair ("mirror-sync": a 2-rank all-reduce per tensor, over
the 2·dp ranks of the pair in every replica when dp > 1, then divided by dp). The GPT's tied
embedding needs no group of its own: the ranks that hold stage 0 hold stage p−1 too, so its two
uses accumulate into one tensor there and the mirror sum adds the rest. Both end ranks report a
share of the loss (each is the last stage of one direction).

Simplification, stated: a rank runs one action at a time (`parlab.pipeline.dualpipe`).
"""

from __future__ import annotations

import dataclasses

from parlab.core.memory import ActivationMeter
from parlab.engine.loop import train
from parlab.engine.runner import register
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.dualpipe import check_sizes, dualpipe
from parlab.pipeline.schemes import (
    Pipeline,
    PipelinePlan,
    PipelineStages,
    assemble,
    n_layers,
    resolve,
    stage_options,
)
from parlab.pipeline.validate import check


def dualpipe_plan(cfg) -> PipelinePlan:
    """pp (default: the deepest even pipeline that fits the layers) and m (default: the fewest
    that DualPipe takes, an even divisor of the rows >= 2·pp); ValueError names what is wrong."""
    o, world, layers = cfg.options, cfg.world_size, n_layers(cfg)
    pp = o.get("pp")
    if pp is None:
        evens = [d for d in range(2, min(world, layers) + 1, 2) if world % d == 0]
        if not evens:
            raise ValueError(f"pp-dualpipe needs an even pp >= 2 dividing world_size={world} "
                             f"with at most {layers} layers; none does")
        pp = evens[-1]
    check_sizes(pp, 2 * pp)  # names an odd pp before anything else
    m = o.get("microbatches")
    if m is None and world % pp == 0:
        rows = cfg.batch_size // max(1, world // pp)
        choices = [k for k in range(2 * pp, rows + 1, 2) if rows % k == 0]
        if not choices:
            raise ValueError(f"pp-dualpipe at pp={pp} needs an even number of micro-batches "
                             f">= {2 * pp} dividing the {rows} rows of a replica "
                             f"(batch_size={cfg.batch_size}); none does")
        m = choices[0]
    if m is not None:
        check_sizes(pp, m)
    plan = resolve(dataclasses.replace(cfg, options={**o, "pp": pp, "microbatches": m}), "1f1b")
    return dataclasses.replace(plan, schedule="dualpipe")


class DualPipeline(Pipeline):
    """The DualPipe schedule on `PipelineExecutor`: two stages per rank, the mirror pair's
    gradients summed, then one update (module docstring)."""

    placement = "mirror"  # rank r holds stages r and p−1−r (split_pp)

    def __init__(self, ctx):
        plan = dualpipe_plan(ctx.cfg)
        PipelineStages.__init__(self, ctx, plan, dualpipe(plan.pp, plan.microbatches))
        self.mirror = ctx.comm.split(mirror_groups(plan), "mirror-sync")
        self.meter = ActivationMeter(exclude=self.params)
        self.executor = self.parts.executor(
            ctx, self.mesh.coords["pp"],
            lambda rows: stages_mod.boundary_shape(ctx.cfg.model_config, rows), self.meter)

    def sync(self, step: int) -> None:
        with self.ctx.ledger.label(phase="mirror-sync"):
            for p in self.params:
                self.mirror.all_reduce(p.grad, op="sum")  # (param shape,) the pair's copies
                if self.plan.dp > 1:
                    p.grad.div_(self.plan.dp)


def mirror_groups(plan: PipelinePlan) -> list[list[int]]:
    """World ranks summing one pair of stages: pipeline ranks r and p−1−r of every replica
    (mesh ("dp", "pp"), pp innermost: world rank d·p + r)."""
    p = plan.pp
    return [sorted(d * p + q for d in range(plan.dp) for q in (r, p - 1 - r))
            for r in range(p // 2)]


def _validate(cfg):
    plan = dualpipe_plan(cfg)
    check(dualpipe(plan.pp, plan.microbatches))


@register("pp-dualpipe", shapes=True, summary="DualPipe (DeepSeek-V3): bidirectional, two stages per rank "
          "(2x parameters), F&B pairs, W deferred into bubbles; <= p+1 micro-batches in flight",
          exact=True, validate=_validate, assemble=assemble,
          options=stage_options())
def pipeline_dualpipe(ctx):
    return train(ctx, DualPipeline(ctx))
