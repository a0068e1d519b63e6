"""The registered scheme `layerwise-merge`: layer-wise partitioning and merging (Akintoye, Han,
Lloyd et al., Future Generation Computer Systems 149, 2023, arXiv 2207.11019).

The layout is the merge `partition_merge.plan` picks from the configuration — k stages of
min-max-balanced layers × dp = world_size/k replicas, the step-time model's minimum over every
k | world_size (or `pp=` given) — and each replica runs one synchronous 1F1B pipeline over it
(chapter 04's executor and schedule): the forward of one micro-batch beside the backward of
another, each stage updating as soon as its own backward and sync are done, on the one weight
version it holds (no stash, unlike `pipedream` and `pipedream-2bw` in `schemes`). After the
schedule: the tied embedding's two copies summed (first and last stage), the stage's gradients
averaged over dp in one flat bucket, one update. Exact: it equals `single` (losses and
parameters, 1e-4) at every world size and merge; its bytes are `cost.merge_bytes_per_rank`.
"""

from __future__ import annotations

from parlab.core.checks import Int
from parlab.data_parallel.flat_all_reduce import all_reduce_flat
from parlab.engine.loop import micro_batches, train
from parlab.engine.runner import register
from parlab.local_learning import cost, partition_merge
from parlab.local_learning.schemes import Stages, assemble
from parlab.pipeline.executor import PipelineExecutor
from parlab.pipeline.schedules import one_f_one_b
from parlab.pipeline.validate import check


class PartitionMerge(Stages):
    """One rank of the merged layout: its stage of its replica, 1F1B, then tie, flat dp sync and
    its own update (the loop's)."""

    def __init__(self, ctx):
        self.candidate = partition_merge.plan(ctx.cfg)  # the same on every rank: counted, not timed
        layout = self.candidate.layout
        super().__init__(ctx, layout)
        schedule = check(one_f_one_b(layout.pp, layout.microbatches))
        self.executor = PipelineExecutor(ctx, schedule, self.pp_rank, {self.pp_rank: self.stage},
                                         self.mesh["pp"], self.comm_b, self.boundary_shape,
                                         self.meter)

    def forward_backward(self, step: int, batch) -> float:
        xs, ys = zip(*micro_batches(batch, self.layout.microbatches))  # m × (B/(dp·m), T) each
        losses = self.executor.run_step(step, xs, ys)
        return sum(losses) / self.layout.microbatches / self.layout.dp if self.reports_loss else 0.0

    def sync(self, step: int) -> None:
        self.sync_tie()
        if self.layout.dp > 1:  # (Σ_s numel,) one bucket over the stage's dp group
            all_reduce_flat(self.mesh["dp"], self.params, op="avg", phase="grad-sync")

    def extras(self) -> dict:
        c, s = self.candidate, self.pp_rank
        return {"stage": s, "dp_rank": self.mesh.coords["dp"], "pp": self.layout.pp,
                "dp": self.layout.dp, "microbatches": self.layout.microbatches,
                "counts": list(self.layout.counts), "predicted_step_s": c.step_s,
                "stage_numel": sum(q.numel() for q in self.params),
                "in_flight_peak": self.executor.in_flight_peak,
                "microbatch_activations": sum(self.executor.microbatch_bytes.values()),
                "peak_versions": 0,  # weight copies stashed: none exists, the live weights only
                "versions_formula": 0}  # cost.merge_stage_memory: stashed_weights = 0


def _validate(cfg):
    partition_merge.plan(cfg)


@register("layerwise-merge", summary="layer-wise partitioning and merging (Akintoye et al. 2023): "
          "layer-wise partitions merged into k stages × dp replicas by a compute + message model, "
          "synchronous 1F1B, no stashed weights; exact", exact=True,
          options={"pp": Int(None, min=1, none=True), "microbatches": Int(None, min=1, none=True)},
          validate=_validate, assemble=assemble,
          cost=lambda cfg: cost.predict_merge(cfg, partition_merge.plan(cfg).layout))
def layerwise_merge(ctx):
    return train(ctx, PartitionMerge(ctx))
