"""The registered schemes of chapter 05: `local`, `interlocking`, `pipedream`, `pipedream-2bw`.

All run on a dp × pp mesh (pp innermost) with stages cut from the reference model (`layout`).
`local` (Belilovsky et al., ICML 2020; depth 0) and `interlocking` (Gomez et al., JMLR 2022;
`depth=`, `aux_weight=`) are one strategy over a route (`routes`); `pipedream` (Narayanan et al.,
SOSP 2019) and `pipedream-2bw` (ICML 2021) are 1F1B that never flushes, with weight stashing
(`stash`). Which settings equal `single` and what the tests hold the others to:
docs/local_learning.md, `parlab.local_learning.schemes`.
"""

from __future__ import annotations

from parlab.core.checks import Float, Int
from parlab.core.memory import ActivationMeter
from parlab.core.mesh import Mesh
from parlab.engine.loop import Strategy, build_model, make_optimizer, micro_batches, state_of, train
from parlab.engine.runner import register
from parlab.local_learning import cost
from parlab.local_learning.heads import AuxHead
from parlab.local_learning.interlock import Interlocking, route_actions, route_schedule
from parlab.local_learning.layout import Layout, resolve
from parlab.local_learning.routes import Route
from parlab.local_learning.stash import StashedPipeline
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.executor import PipelineExecutor


class Stages(Strategy):
    """The dp × pp mesh, this rank's stage cut from the reference, the tie's communicator and
    the gradient channel; subclasses say how a step runs."""

    def __init__(self, ctx, layout: Layout, extra_params=lambda stage: []):
        self.layout = layout
        self.mesh = mesh = Mesh(ctx.comm, [("dp", layout.dp), ("pp", layout.pp)])
        self.pp_rank = mesh.coords["pp"]
        ends = [sorted({mesh.rank_of(dp=d, pp=0), mesh.rank_of(dp=d, pp=layout.pp - 1)})
                for d in range(layout.dp)]
        flat = {r for g in ends for r in g}
        self.tie_comm = ctx.comm.split(ends + [[r] for r in range(ctx.world_size) if r not in flat],
                                       "embed-tie")
        self.comm_b = ctx.comm.split(mesh.groups("pp"), "pp-bwd")  # gradients down: own FIFO
        model = build_model(ctx.cfg)
        self.stage = stages_mod.build_stages(model, [self.pp_rank], list(layout.counts))[self.pp_rank]
        self.params = list(model.parameters())  # this stage's share of the reference
        self.extra = list(extra_params(self.pp_rank))  # e.g. the auxiliary head's
        self.tied = stages_mod.tied_parameter(model)
        super().__init__(ctx, model, make_optimizer(self.params + self.extra, ctx.cfg),
                         shard=mesh.coords["dp"], shards=layout.dp,
                         reports_loss=self.pp_rank == layout.pp - 1,
                         meter=ActivationMeter(exclude=self.params + self.extra))

    def boundary_shape(self, rows: int) -> tuple:
        return stages_mod.boundary_shape(self.ctx.cfg.model_config, rows)

    def sync_tie(self) -> None:
        if self.tied is not None and self.tie_comm.size > 1:
            with self.ctx.ledger.label(phase="embed-tie"):
                self.tie_comm.all_reduce(self.tied.grad, op="sum")  # (vocab, C) first + last

    def sync_dp(self) -> None:
        if self.layout.dp > 1:
            with self.ctx.ledger.label(phase="grad-sync"):
                for q in self.params + self.extra:
                    self.mesh["dp"].all_reduce(q.grad, op="avg")  # (param shape,) over dp

    def state(self):
        return state_of(self.model) if self.holds_state else None


class LocalLearning(Stages):
    """A route of depth d: local (d = 0) or interlocking backpropagation (d >= 1)."""

    def __init__(self, ctx, depth: int, aux_weight: float):
        layout = resolve(ctx.cfg)
        self.route = route = Route.of(layout.pp, depth, aux_weight)
        self.head = None

        def head_params(stage):
            if route.has_head(stage):
                self.head = AuxHead(ctx.cfg.model_config, stage, ctx.cfg.seed)
                return self.head.parameters()
            return []
        super().__init__(ctx, layout, head_params)
        if not route.tied:
            self.tied = None  # each end trains its own copy (routes: the tie would lock them)
        m = layout.microbatches
        self.routing = Interlocking(ctx, route, self.head, self.params + self.extra)
        self.executor = PipelineExecutor(ctx, route_schedule(route, m), self.pp_rank,
                                         {self.pp_rank: self.stage}, self.mesh["pp"], self.comm_b,
                                         self.boundary_shape, self.meter, self.routing)
        self.actions = route_actions(route, m, self.pp_rank)  # the route's truncated messages
        self.aux_log: list[float | None] = []

    def forward_backward(self, step: int, batch) -> float:
        xs, ys = zip(*micro_batches(batch, self.layout.microbatches))  # m × (B/(dp·m), T)
        losses = self.executor.run_step(step, xs, ys, self.actions)
        aux, self.routing.aux = self.routing.aux, []
        self.aux_log.append(sum(aux) / len(aux) if aux else None)
        return sum(losses) / self.layout.microbatches / self.layout.dp if self.reports_loss else 0.0

    def sync(self, step: int) -> None:
        self.sync_tie()
        self.sync_dp()

    def extras(self) -> dict:
        return {"stage": self.pp_rank, "dp_rank": self.mesh.coords["dp"], "aux_losses": self.aux_log,
                "warmup": self.route.warmup(self.pp_rank, self.layout.microbatches),
                "tied": self.route.tied, "stage_numel": sum(q.numel() for q in self.params)}


def assemble(outputs: list, cfg) -> dict:
    """The reference's parameters: the union of the stages' (the head's copy of a tie last)."""
    state = {}
    for out in outputs:
        state.update(out.state or {})
    return state


def _validate(cfg):
    resolve(cfg)


@register("local", summary="decoupled greedy learning: a local loss per stage, no gradient "
          "crosses a boundary (Belilovsky et al. 2020)", exact=False,
          options={"pp": Int(None, min=1, none=True), "microbatches": Int(None, min=1, none=True)},
          validate=_validate, assemble=assemble,
          cost=lambda cfg: cost.predict(cfg, depth=0, aux_weight=1.0),
          forms={"boundary_bytes": cost.boundary_table})
def local(ctx):
    return train(ctx, LocalLearning(ctx, depth=0, aux_weight=1.0))


@register("interlocking", summary="interlocking backprop: each loss trains `depth` stages "
          "below it (Gomez et al. 2022); depth=pp-1, aux_weight=0 is global backprop", exact=False,
          options={"pp": Int(None, min=1, none=True), "microbatches": Int(None, min=1, none=True),
                   "depth": Int(1, min=0), "aux_weight": Float(1.0, min=0)},
          validate=_validate, assemble=assemble,
          cost=lambda cfg: cost.predict(cfg, cfg.options["depth"], cfg.options["aux_weight"]),
          forms={"boundary_bytes": cost.boundary_table})
def interlocking(ctx):
    o = ctx.cfg.options
    return train(ctx, LocalLearning(ctx, depth=o["depth"], aux_weight=o["aux_weight"]))


class StalePipeline(Stages):
    """PipeDream (`group=1`) or PipeDream-2BW (`group=m`) on one pipeline; the optimizer steps
    inside the schedule, so the loop's `sync` and `update` only observe."""

    def __init__(self, ctx, two_buffers: bool):
        layout = resolve(ctx.cfg, allow_dp=False)
        super().__init__(ctx, layout)
        self.two_buffers = two_buffers
        m = layout.microbatches
        tie = self.sync_tie if m == 1 else None  # one in flight: the ends are locked anyway
        if tie is None:
            self.tied = None
        self.pipe = StashedPipeline(ctx, layout.pp, self.pp_rank, m, m if two_buffers else 1,
                                    ctx.cfg.steps, self.stage, self.optimizer, self.mesh["pp"],
                                    self.comm_b, self.boundary_shape, self.meter, tie)

    def forward_backward(self, step: int, batch) -> float:
        xs, ys = zip(*micro_batches(batch, self.layout.microbatches))  # m × (B/m, T)
        losses = self.pipe.run_step(step, xs, ys)
        return sum(losses) / self.layout.microbatches if self.reports_loss else 0.0

    def update(self, step: int) -> None:
        self.observe_memory()

    def finish(self) -> None:
        self.pipe.drain(self.ctx.cfg.steps)

    def extras(self) -> dict:
        p, m, s = self.layout.pp, self.layout.microbatches, self.pp_rank
        formula = cost.twobw_versions(p, m, s) if self.two_buffers else cost.pipedream_versions(p, m, s)
        return {"stage": s, "versions": self.pipe.records,
                "peak_versions": self.pipe.stash.peak_versions, "warmup": self.pipe.warmup,
                "stage_numel": self.pipe.stash.numel(), "tied": self.tied is not None,
                "versions_formula": formula}  # the closed form beside the measured peak


def _validate_pipe(cfg):
    resolve(cfg, allow_dp=False)


PIPE_OPTIONS = {"pp": Int(None, min=1, none=True), "microbatches": Int(None, min=1, none=True)}


@register("pipedream", summary="PipeDream: 1F1B without flushes, an update per micro-batch, "
          "weight stashing (Narayanan et al. 2019); microbatches=1 is exact", exact=False,
          options=PIPE_OPTIONS, validate=_validate_pipe, assemble=assemble,
          cost=lambda cfg: cost.predict_pipe(cfg), forms={"versions": cost.pipedream_versions})
def pipedream(ctx):
    return train(ctx, StalePipeline(ctx, two_buffers=False))


@register("pipedream-2bw", summary="PipeDream-2BW: 1F1B without flushes, one update per m "
          "micro-batches, two weight versions (Narayanan et al. 2021)", exact=False,
          options=PIPE_OPTIONS, validate=_validate_pipe, assemble=assemble,
          cost=lambda cfg: cost.predict_pipe(cfg), forms={"versions": cost.twobw_versions})
def pipedream_2bw(ctx):
    return train(ctx, StalePipeline(ctx, two_buffers=True))
