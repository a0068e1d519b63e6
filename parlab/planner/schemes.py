"""The scheme `nd`: any plan dp × tp × pp × cp (ZeRO stage, micro-batches, schedule) on one mesh.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021): PTD-P composes pipeline, tensor and data parallelism; here context
parallelism (ring attention, Liu et al. ICLR 2024) and ZeRO (Rajbhandari et al. SC 2020) join
them. The model is built by `parlab.planner.compose` in torchtitan's order (tp, cp, ep, pp, then
dp or ZeRO); each `apply_*` registers its `Dimension` (`parlab.engine.dimension`) on the
model, and this strategy runs the one loop over them, never asking which are there:

    forward_backward — the pipeline schedule (pp > 1) or m accumulated micro-batches, each
                       dimension told when the step starts and which micro-batch is the last;
    sync             — every dimension's `after_backward` in order (the tied embedding's sum over
                       first/last stage; dp's reducer averaging over dp × cp — chapter 01's
                       flat, per-tensor, bucketed, overlapped, DeAR or P3 sync, or chapter 08's
                       compressed one; or ZeRO's reduce-scatter), then `after_sync` in reverse
                       (the tie after an overlapped average; the experts' sum over ep replicas);
    update           — AdamW on this rank's slice (ZeRO: its shard, then the all-gather); a
                       dimension that owns the update (DeAR, P3) is handed the optimizer once,
                       cut per bucket, each piece stepped before the bucket's first layer in the
                       next forward, and the last step's flushed by `finish`.

The options are exactly the fields of `parlab.planner.plan.Plan` (`checkpoint` is the common
option of every scheme; `ep=` needs `model="gpt-moe"`), so
`parlab.run("nd", world_size=plan.world_size, **plan.options())` runs any plan; `Plan.problems`
names every factor a plan fails before any process starts.
"""

from __future__ import annotations

from parlab.core import speeds
from parlab.core.checks import Choice, Float, Int
from parlab.core.memory import ActivationMeter, model_memory, optimizer_state_tensors, tensor_bytes
from parlab.data_parallel.apply import ALL_REDUCERS
from parlab.data_parallel.strategy import ComputeSpan
from parlab.engine.dimension import Piece, assemble_pieces, dimensions
from parlab.engine.loop import Strategy, build_model, make_optimizer, step_batch, train
from parlab.engine.runner import register
from parlab.planner import compose
from parlab.planner.cost import nd_prediction
from parlab.planner.plan import COMPRESSOR_FIELDS, DEGREES, DP_SYNCS, SCHEDULES, ZERO_STAGES, Plan

OPTIONS = {**{d: Int(1, min=1) for d in DEGREES}, "zero": Choice(0, ZERO_STAGES),
           "microbatches": Int(1, min=1), "schedule": Choice("1f1b", SCHEDULES),
           "dp_sync": Choice("flat", DP_SYNCS), "dp_bucket_mb": Float(25.0, min=0, unit="MiB"),
           "dp_partition_kb": Float(32.0, min=4 / 1024, unit="KiB: >= one float32"),
           "dp_credit": Int(1, min=1),
           # chapter 08's compressor and its options: checked by Plan.problems (the choices are
           # the registered compressor schemes, known once the registry is)
           "dp_compressor": "none", **dict.fromkeys(COMPRESSOR_FIELDS)}
COORDS = ("pp", "dp", "cp", "tp", "ep")  # a rank's mesh coordinates (ep borrowed from dp)


def plan_of(cfg) -> Plan:
    """The run's Plan: the scheme's options and the common `checkpoint`."""
    return Plan(**{name: cfg.options[name] for name in OPTIONS}, checkpoint=cfg.checkpoint)


def validate(cfg) -> None:
    """One ValueError naming every factor the plan fails (`Plan.problems`)."""
    n_experts = getattr(cfg.model_config, "n_experts", None)
    plan = plan_of(cfg)
    plan.validate(cfg.world_size, cfg.model_config, cfg.batch_size, n_experts)
    if cfg.precision != "fp32" and plan.zero > 0:
        raise ValueError(f"precision={cfg.precision!r} with zero={plan.zero}: nd's ZeRO shards "
                         "hold fp32 gradients only; use zero=0 with bf16-mixed (Megatron-LM's "
                         "plans), or chapter 02's zero1/zero2/zero3 schemes, which take bf16")
    if cfg.precision != "fp32" and getattr(ALL_REDUCERS.get(plan.dp_sync), "owns_update", False):
        raise ValueError(f"precision={cfg.precision!r} with dp_sync={plan.dp_sync!r}: its "
                         "layer-wise update steps fp32 parameters itself; use dp_sync 'flat', "
                         "'naive', 'bucketed' or 'overlap' with bf16-mixed")


class ND(Strategy):
    """One rank of a composed plan: its tp slice of its pp stage, on its T/cp tokens of its
    B/dp rows; see the module docstring for the step."""

    def __init__(self, ctx):
        cfg = ctx.cfg
        self.plan = plan = plan_of(cfg)
        self.mesh = mesh = compose.build_mesh(ctx.comm, plan)
        meter = ActivationMeter()
        model = compose.parallelize(build_model(cfg), mesh, plan, meter, seed=cfg.seed)
        self.dims = dims = dimensions(model)  # in the order compose applied them
        trainable = [t for d in dims for t in (d.trainable() or [])]
        params = trainable or list(model.parameters())
        meter.exclude(list(model.parameters()) + trainable)
        self.coords = {name: mesh.coord(name) for name in COORDS if name != "ep"}
        self.coords["ep"] = self.coords["dp"] % plan.ep  # ep borrows its ranks from dp
        self.replicas = plan.dp * plan.cp  # ranks averaging one parameter slice's gradients
        parts = model.pipeline
        super().__init__(ctx, model, make_optimizer(params, cfg), shard=self.coords["dp"],
                         shards=plan.dp,
                         reports_loss=self.coords["tp"] == 0 and (parts is None or parts.last),
                         holds_state=all(d.holds_full_slice for d in dims)
                         and self.coords["dp"] < plan.ep and self.coords["cp"] == 0,
                         meter=meter)
        # a dimension that owns the update (dp with DeAR, P3) takes the optimizer, cut per
        # bucket; it steps each piece inside the next forward, pausing that forward's span
        self.forward_span: ComputeSpan | None = None
        self.optimizers = [self.optimizer]
        self.owner = next((d for d in dims if d.owns_update), None)
        if self.owner is not None:
            self.optimizers = self.owner.own_update(ctx, model, self.optimizer,
                                                    lambda: self.forward_span)
        self.executor = None
        if parts is not None:
            T, C = len(model.positions), cfg.model_config.n_embd
            self.executor = parts.executor(ctx, self.coords["pp"], lambda rows: (rows, T, C),
                                           meter)  # boundary (mb, T/cp, C)

    @property
    def owned(self) -> bool:
        """Whether a dimension owns the update (`dp_sync="dear"`, "priority")."""
        return self.owner is not None

    def batch(self, step: int):
        x, y = step_batch(self.ctx.cfg, step, self.shard, self.shards)  # (B/dp, T)
        mine = self.model.positions  # (T/cp,) this rank's tokens
        return x[:, mine], y[:, mine]  # (B/dp, T/cp)

    def forward_backward(self, step: int, batch) -> float:
        m, model = self.plan.microbatches, self.model
        for d in self.dims:
            d.start_step()
        xs, ys = batch[0].chunk(m), batch[1].chunk(m)  # m × (B/(dp·m), T/cp)
        if self.executor is not None:
            for d in self.dims:
                d.before_micro(last=True)  # overlap: ready at the m-th backward
            losses = self.executor.run_step(step, list(xs), list(ys))
            return sum(losses) / m / self.replicas if self.reports_loss else 0.0
        total = 0.0
        for micro, (x, y) in enumerate(zip(xs, ys)):
            for d in self.dims:
                d.before_micro(last=micro == m - 1)  # overlap: the last communicates
            forward = ComputeSpan(self.ctx.timeline, "forward",
                                  speeds.speed_of(self.ctx.cfg, self.ctx.rank), step=step,
                                  micro=micro) if self.owned else \
                self.ctx.span("forward", step=step, micro=micro)
            self.forward_span = forward if self.owned else None
            with forward, self.meter:
                loss = model.loss(x, y)  # this rank's tokens' mean (DeAR: updates before layers)
            self.forward_span = None
            with self.ctx.span("backward", step=step, micro=micro), self.meter:
                (loss / m).backward()
            total += loss.item()
        return total / m / self.replicas

    def sync(self, step: int) -> None:
        for d in self.dims:  # the tie's sum, dp's average or ZeRO's reduce-scatter
            if d.after_backward_span:  # its own compute (a compressor's), priced like any other
                with self.ctx.span(d.after_backward_span, step=step):
                    d.after_backward()
            else:
                d.after_backward()
        for d in reversed(self.dims):  # a tie after an overlapped average, the experts' sum
            d.after_sync()

    def update(self, step: int) -> None:
        if self.owned:  # deferred: each bucket is stepped in the next forward, after its all-gather
            self.observe_memory()
            return
        with self.ctx.span("optimizer", step=step):
            self.optimizer.step()
        for d in self.dims:
            d.after_step()  # ZeRO: the updated shards all-gathered
        self.observe_memory()
        if not any([d.clear_grads(self.optimizer) for d in self.dims]):
            self.optimizer.zero_grad(set_to_none=True)

    def finish(self) -> None:
        if self.owned:
            self.owner.flush()  # DeAR: the last step's updates, still owed

    def memory(self) -> dict:
        memory = model_memory(self.model.parameters(), None)
        memory["optimizer"] = tensor_bytes(t for optimizer in self.optimizers
                                           for t in optimizer_state_tensors(optimizer))
        for d in self.dims:  # a reducer's flat buffers; ZeRO's own accounting
            memory = d.memory(memory, self.optimizer)
        return memory

    def extras(self) -> dict:
        out = {**self.coords, "plan": self.plan.options(),
               "dimensions": [d.name for d in self.dims],
               "holds_piece": self.holds_state or not all(d.holds_full_slice for d in self.dims)}
        moes = [b.mlp for b in self.model.blocks if hasattr(b, "mlp") and hasattr(b.mlp, "log")]
        if moes:
            out["routing"] = [moe.log for moe in moes]
        for d in self.dims:
            out.update(d.extras())
        return out


def assemble(outputs, cfg) -> dict:
    """The reference-named full state: every rank holding a piece (its slice, or its ZeRO shards)
    gives it, and the dimensions glue them, the last applied first (`assemble_pieces`)."""
    pieces = [Piece({a: out.extras[a] for a in COORDS}, out.state, out.extras)
              for out in outputs if out.extras["holds_piece"]]
    return assemble_pieces(pieces, outputs[0].extras["dimensions"])


@register("nd", shapes=True, summary="any plan dp × tp × pp × cp on one mesh (ZeRO stage, micro-batches, "
          "schedule): the chapters' dimensions composed", exact=True, options=OPTIONS,
          validate=validate, assemble=assemble, models=("gpt", "gpt-moe"), cost=nd_prediction,
          precisions=("fp32", "bf16-mixed"))
def nd_scheme(ctx):
    return train(ctx, ND(ctx))
