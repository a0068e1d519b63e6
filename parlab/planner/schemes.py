"""The scheme `nd`: any plan dp × tp × pp × cp (ZeRO stage, micro-batches, schedule) on one mesh.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC 2021): PTD-P composes pipeline, tensor and data parallelism; here context
parallelism (ring attention, Liu et al. ICLR 2024) and ZeRO (Rajbhandari et al. SC 2020) join
them. The model is built by `parlab.planner.compose` in torchtitan's order (tp, cp, ep, pp, then
dp or ZeRO); this strategy only runs it in the one loop:

    forward_backward — the pipeline schedule (pp > 1) or m accumulated micro-batches;
    sync             — tied embedding summed over first/last stage, gradients averaged over dp × cp
                       by the reducer `apply_dp` attached (`Plan.dp_sync`: chapter 01's flat,
                       per-tensor, bucketed or overlapped sync; the overlapped one starts in the
                       last micro-batch's backward; DeAR's reduce-scatters too, its all-gathers
                       end in the next forward, and so do P3's priority partitions; or
                       `Plan.dp_compressor`: chapter 08's compressed sync with error feedback);
    update           — AdamW on this rank's slice (ZeRO: its shard, then the all-gather); with
                       `dp_sync="dear"` or "priority" the reducer owns it: the step's optimizer is handed to
                       it once, cut per bucket, each piece stepped before the bucket's first
                       layer in the next forward, and the last step's flushed by `finish`.

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
from parlab.data_parallel.flat import all_reduce_flat
from parlab.data_parallel.sync import ComputeSpan
from parlab.engine.loop import Strategy, build_model, make_optimizer, step_batch, train
from parlab.engine.runner import register
from parlab.expert_parallel.layer import assemble_state as ep_assemble
from parlab.models.mesh_gpt import MeshGPT
from parlab.planner import compose
from parlab.planner.cost import nd_prediction
from parlab.planner.plan import COMPRESSOR_FIELDS, DEGREES, DP_SYNCS, SCHEDULES, ZERO_STAGES, Plan
from parlab.tensor_parallel.layers import assemble_state as tp_assemble
from parlab.zero.shard import FlatLayout
from parlab.zero.shard import assemble_state as zero_assemble

OPTIONS = {**{d: Int(1, min=1) for d in DEGREES}, "zero": Choice(0, ZERO_STAGES),
           "microbatches": Int(1, min=1), "schedule": Choice("1f1b", SCHEDULES),
           "dp_sync": Choice("flat", DP_SYNCS), "dp_bucket_mb": Float(25.0, min=0, unit="MiB"),
           "dp_partition_kb": Float(32.0, min=4 / 1024, unit="KiB: >= one float32"),
           "dp_credit": Int(1, min=1),
           # chapter 08's compressor and its options: checked by Plan.problems (the choices are
           # the registered compressor schemes, known once the registry is)
           "dp_compressor": "none", **dict.fromkeys(COMPRESSOR_FIELDS)}


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


def sync_gradients(model: MeshGPT) -> None:
    """After backward: the tied embedding's two copies summed (pp), then every gradient averaged
    over dp × cp — by the reducer apply_dp attached (`model.grad_sync`), or ZeRO's reduce-scatter
    (apply_zero). Ledger phases: "embed-tie", "dp-grad-sync" (ZeRO: its own
    "grad-reduce-scatter")."""
    parts, sync = model.pipeline, model.grad_sync
    tie = (parts is not None and parts.tie_comm.size > 1 and hasattr(model, "wte")
           and model.config.tie_head)  # an untied head (tie_head=False): nothing to sum
    # an overlapped dp sync has already sent the stage's own wte gradient: average, then tie
    # (Σ of the two averages = the average of the sums)
    late_tie = sync is not None and sync.during_backward
    if tie and not late_tie:
        parts.tie_comm.all_reduce(model.wte.weight.grad, op="sum",
                                  phase="embed-tie")  # (vocab, C) first + last stage
    if model.zero is not None:
        model.zero.end_backward()
        return
    if sync is None:
        return
    sync.after_backward()  # every dense gradient averaged over dp × cp
    if tie and late_tie:
        parts.tie_comm.all_reduce(model.wte.weight.grad, op="sum",
                                  phase="embed-tie")  # (vocab, C) first + last stage
    sharded = compose.expert_parameters(model)
    if sharded:  # each rank's experts saw its ep group's rows: Σ over the replicas, ÷ dp·cp
        if model.expert_comm is not None:
            all_reduce_flat(model.expert_comm, sharded, "sum", "expert-grad-sync")
        for p in sharded:
            p.grad.div_(model.expert_replicas)


class ND(Strategy):
    """One rank of a composed plan: its tp slice of its pp stage, on its T/cp tokens of its
    B/dp rows; see the module docstring for the step."""

    def __init__(self, ctx):
        cfg = ctx.cfg
        self.plan = plan = plan_of(cfg)
        self.mesh = mesh = compose.build_mesh(ctx.comm, plan)
        meter = ActivationMeter()
        model = compose.parallelize(build_model(cfg), mesh, plan, meter, seed=cfg.seed)
        zero = model.zero
        params = zero.shards if zero is not None else list(model.parameters())
        meter.exclude(list(model.parameters()) + (zero.shards if zero is not None else []))
        self.coords = {name: mesh.coord(name) for name in ("pp", "dp", "cp", "tp")}
        self.coords["ep"] = self.coords["dp"] % plan.ep  # ep borrows its ranks from dp
        self.replicas = plan.dp * plan.cp  # ranks averaging one parameter slice's gradients
        parts = model.pipeline
        super().__init__(ctx, model, make_optimizer(params, cfg), shard=self.coords["dp"],
                         shards=plan.dp,
                         reports_loss=self.coords["tp"] == 0 and (parts is None or parts.last),
                         holds_state=zero is None and self.coords["dp"] < plan.ep
                         and self.coords["cp"] == 0,
                         meter=meter)
        # a reducer that owns the update (DeAR) takes the optimizer, cut per bucket; it steps
        # each piece inside the next forward, pausing that forward's span while it waits
        self.forward_span: ComputeSpan | None = None
        self.optimizers = [self.optimizer]
        if self.owned:
            self.optimizers = model.grad_sync.own_update(ctx, model, self.optimizer,
                                                         lambda: self.forward_span)
        self.executor = None
        if parts is not None:
            T, C = len(model.positions), cfg.model_config.n_embd
            self.executor = parts.executor(ctx, self.coords["pp"], lambda rows: (rows, T, C),
                                           meter)  # boundary (mb, T/cp, C)

    @property
    def owned(self) -> bool:
        """Whether the reducer owns the update (`dp_sync="dear"`, "priority")."""
        sync = self.model.grad_sync
        return sync is not None and sync.owns_update

    def batch(self, step: int):
        x, y = step_batch(self.ctx.cfg, step, self.shard, self.shards)  # (B/dp, T)
        mine = self.model.positions  # (T/cp,) this rank's tokens
        return x[:, mine], y[:, mine]  # (B/dp, T/cp)

    def forward_backward(self, step: int, batch) -> float:
        m, model = self.plan.microbatches, self.model
        if model.zero is not None:
            model.zero.start_step()
        xs, ys = batch[0].chunk(m), batch[1].chunk(m)  # m × (B/(dp·m), T/cp)
        if self.executor is not None:
            if model.grad_sync is not None:
                model.grad_sync.before_micro(last=True)  # overlap: ready at the m-th backward
            losses = self.executor.run_step(step, list(xs), list(ys))
            return sum(losses) / m / self.replicas if self.reports_loss else 0.0
        total = 0.0
        for micro, (x, y) in enumerate(zip(xs, ys)):
            if model.grad_sync is not None:
                model.grad_sync.before_micro(last=micro == m - 1)  # overlap: the last communicates
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
        sync_gradients(self.model)

    def update(self, step: int) -> None:
        if self.owned:  # deferred: each bucket is stepped in the next forward, after its all-gather
            self.observe_memory()
            return
        zero = self.model.zero
        with self.ctx.span("optimizer", step=step):
            self.optimizer.step()
        if zero is not None:
            zero.after_step()
        self.observe_memory()
        if zero is not None:
            zero.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def finish(self) -> None:
        if self.owned:
            self.model.grad_sync.flush()  # DeAR: the last step's updates, still owed

    def memory(self) -> dict:
        if self.model.zero is not None:
            return self.model.zero.memory(self.optimizer)
        memory = model_memory(self.model.parameters(), None)
        memory["optimizer"] = tensor_bytes(t for optimizer in self.optimizers
                                           for t in optimizer_state_tensors(optimizer))
        buffers = self.model.grad_sync.buffers() if self.model.grad_sync is not None else []
        if buffers:  # a bucketed reducer's flat buffers (Plan.dp_sync)
            memory["comm_buffers"] = tensor_bytes(buffers)
        return memory

    def extras(self) -> dict:
        out = {**self.coords, "plan": self.plan.options(),
               "expert_names": [n for n, p in self.model.named_parameters()
                                if any(p is q for q in compose.expert_parameters(self.model))]}
        moes = [b.mlp for b in self.model.blocks if hasattr(b, "mlp") and hasattr(b.mlp, "log")]
        if moes:
            out["routing"] = [moe.log for moe in moes]
        zero = self.model.zero
        if zero is not None:
            out["data_rank"] = self.model.data_comm.rank
            out["shards"] = {u.name: u.shard.detach().clone() for u in zero.units}
            out["layouts"] = [u.layout.to_meta() for u in zero.units]
        return out


def assemble(outputs, cfg) -> dict:
    """The reference-named full state: ZeRO shards glued over dp × cp, experts over ep, tp
    slices over tp, the stages' parameters united over pp (the tied copies are equal)."""
    plan = plan_of(cfg)
    slices: dict[tuple, dict] = {}  # (pp, tp) -> this slice's full parameters
    sharded: dict[tuple, list] = {}
    by_ep: dict[tuple, list] = {}
    for out in outputs:
        e = out.extras
        key = (e["pp"], e["tp"])
        if "shards" in e:
            sharded.setdefault(key, []).append(e)
        elif out.state is not None:
            by_ep.setdefault(key, []).append((e["ep"], out.state, e["expert_names"]))
    for key, states in by_ep.items():
        states.sort(key=lambda t: t[0])
        slices[key] = ep_assemble([s for _, s, _ in states], states[0][2])
    for key, group in sharded.items():
        group.sort(key=lambda e: e["data_rank"])
        layouts = [FlatLayout.from_meta(m) for m in group[0]["layouts"]]
        slices[key] = zero_assemble(layouts, [e["shards"] for e in group])
    full = {}
    for stage in range(plan.pp):
        full.update(tp_assemble([slices[(stage, t)] for t in range(plan.tp)]))
    return full


@register("nd", shapes=True, summary="any plan dp × tp × pp × cp on one mesh (ZeRO stage, micro-batches, "
          "schedule): the chapters' dimensions composed", exact=True, options=OPTIONS,
          validate=validate, assemble=assemble, models=("gpt", "gpt-moe"), cost=nd_prediction,
          precisions=("fp32", "bf16-mixed"))
def nd_scheme(ctx):
    return train(ctx, ND(ctx))
