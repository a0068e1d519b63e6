"""Layer-wise partitioning and merging: cut the model after every layer, then merge neighbouring
partitions wherever a boundary costs more in messages than it buys in parallel compute — the
stage count, the layers per stage and the data-parallel replicas the freed devices become,
chosen by one step-time model of compute and communication.

Paper: Akintoye, Han, Lloyd, Zhang, Dancey, Chen, Zhang, "Layer-wise partitioning and merging for
efficient and scalable deep learning", Future Generation Computer Systems 149 (2023) 432–444,
arXiv 2207.11019: cut communication without the memory of weight stashing, and parallelise
forward and backward against update locking.

Ours (every choice is parlab's: only the paper's abstract and highlights were available): for k
stages, chapter 04's min-max split (`parlab.pipeline.partition.min_max_split`) of counted
per-layer work; k × dp = world_size; each merge's step simulated as 1F1B with a flush on the
run's link (`cost.merge_step_time`), the fastest k kept. Synchronous, so it equals `single`.
Each simplification, stated: docs/local_learning.md, `parlab.local_learning.partition_merge`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from parlab.core import cost as core_cost
from parlab.core import topology
from parlab.core.clock import Work
from parlab.core.cost import FP32_BYTES
from parlab.core.pacer import count_work
from parlab.engine.loop import build_model, make_optimizer, step_batch
from parlab.local_learning import cost
from parlab.local_learning.layout import Layout, n_layers
from parlab.pipeline import cost as pp_cost
from parlab.pipeline import stages as stages_mod
from parlab.pipeline.partition import min_max_split
from parlab.pipeline.schedules import one_f_one_b
from parlab.pipeline.validate import simulate


@dataclass(frozen=True)
class UnitWork:
    """One layer-wise partition's counted work (`parlab.core.clock.Work`): its forward and its
    backward on one micro-batch, one optimizer step over its parameters; its parameter count."""

    forward: Work
    backward: Work
    optimizer: Work
    numel: int


@dataclass(frozen=True)
class Candidate:
    """One merge: k stages (`layout.pp`) × dp replicas, its layers per stage, and the model's
    seconds (the run's clock): per stage and micro-batch its forward, backward and pace (F + B +
    the messages it receives), one message, the simulated pipeline, per stage sync and update, and
    the step."""

    layout: Layout
    forward_s: tuple
    backward_s: tuple
    pace_s: tuple
    message_s: float
    pipeline_s: float
    sync_s: tuple
    optimizer_s: tuple
    step_s: float


_UNITS: dict = {}
_OPTIMIZER: dict = {}


def unit_work(cfg, rows: int, microbatches: int) -> list[UnitWork]:
    """Every layer-wise partition's work on a micro-batch of `rows` rows (cached per model and
    shape): partition u is layer u, the first with the embedding, the last with the head and the
    loss (/ m), as the executor's F and B spans run them. The middle partitions are one and the
    same layer (a GPT block, an MLP hidden linear), counted once."""
    key = (cfg.model, cfg.model_config, cfg.seed, cfg.optimizer, rows, microbatches)
    if key in _UNITS:
        return _UNITS[key]
    model = build_model(cfg)
    L = n_layers(cfg)
    units = stages_mod.build_stages(model, list(range(L)), [1] * L)  # one layer each
    x_all, y_all = step_batch(cfg, 0)
    x0, y = x_all[:rows], y_all[:rows]  # (rows, T) ids or (rows, 2) points
    shape = stages_mod.boundary_shape(cfg.model_config, rows)  # (rows, T, C) or (rows, d)
    g = torch.Generator().manual_seed(cfg.seed)
    out, seen = [], {}
    for u in range(L):
        kind = "first" if u == 0 else "last" if u == L - 1 else "middle"  # middles: one same layer
        if kind not in seen:
            x = x0 if u == 0 else torch.randn(shape, generator=g).requires_grad_()
            grad = None if u == L - 1 else torch.randn(shape, generator=g)  # (rows, T, C) from above
            forward, backward = _count_pass(units[u], x, y, grad, microbatches)
            params = list(units[u].parameters())
            seen[kind] = UnitWork(forward, backward, _optimizer_work(cfg, kind, params),
                                  sum(p.numel() for p in params))
        out.append(seen[kind])
    _UNITS[key] = out
    return out


def _optimizer_work(cfg, kind: str, params: list) -> Work:
    """The `Work` of one optimizer step over a partition's parameters (with gradients):
    the same at every micro-batch size, so counted once per model and partition kind."""
    key = (cfg.model, cfg.model_config, cfg.optimizer, kind)
    if key not in _OPTIMIZER:
        opt = make_optimizer(params, cfg)
        opt.step()  # the first step creates the optimizer's state; the second is every step's
        _OPTIMIZER[key] = count_work(opt.step)
    return _OPTIMIZER[key]


def _count_pass(stage, x, targets, grad, microbatches: int) -> tuple[Work, Work]:
    """The `Work` of one F (the stage, and on the last its loss / m) and of a step's m B's (each a
    backward from the loss, or from the output with `grad`: the first assigns the parameters'
    gradients, the m − 1 others add to them; `evaluate` averages them), as the executor's spans
    run them."""
    held = {}

    def forward():
        h = stage(x)  # (rows, T, C), or the logits on the last partition
        held["root"] = stage.loss(h, targets) / microbatches if grad is None else h

    def backward():
        torch.autograd.backward([held["root"]], None if grad is None else [grad])

    stage.zero_grad(set_to_none=True)
    first = count_work(forward), count_work(backward)  # the step's first B assigns the gradients
    if microbatches == 1:
        return first
    forward()
    x.grad = None  # each micro-batch's input is its own tensor: only the parameters accumulate
    later = count_work(backward)  # the m − 1 others add to them
    return first[0], Work(first[1].ops, first[1].flops,
                          first[1].kernels + later.kernels * (microbatches - 1))


def link_of(cfg):
    """The link the model prices messages on: the run's, a `Topology`'s slowest pair, or None."""
    link = cfg.link
    if isinstance(link, topology.Topology):
        return link.link_for(range(cfg.world_size))
    return link


def _alpha_beta(cfg) -> tuple[float, float]:
    link = link_of(cfg)
    return (0.0, float("inf")) if link is None else (link.latency_s, link.bandwidth_Bps)


def pricing_clock(cfg):
    """The clock that prices the counted work: the run's, or on the wall clock the A100's (a plan
    needs a device to price on, and every rank must compute the same one)."""
    from parlab.core.clock import resolve

    return cfg.clock if cfg.clock.paced else resolve("A100")


def default_microbatches(rows: int, pp: int) -> int:
    """The fewest micro-batches that fill k stages: the smallest divisor of the rows >= pp."""
    return next((k for k in range(1, rows + 1) if rows % k == 0 and k >= pp), rows)


def evaluate(cfg, pp: int, dp: int, microbatches: int) -> Candidate:
    """The best merge into `pp` stages for dp replicas of m micro-batches, and its step time."""
    mc, layers, clock = cfg.model_config, n_layers(cfg), pricing_clock(cfg)
    rows = cfg.batch_size // dp
    units = unit_work(cfg, rows // microbatches, microbatches)
    f_unit = [clock.price(u.forward) for u in units]
    b_unit = [clock.price(u.backward) / microbatches for u in units]  # B averaged over the m
    alpha, beta = _alpha_beta(cfg)
    message = alpha + cost.activation_bytes(mc, rows // microbatches) / beta if pp > 1 else 0.0

    def pace(s, i, j):  # stage s holds layers [i, j): F + B + the messages it receives
        return sum(f_unit[i:j]) + sum(b_unit[i:j]) + message * cost.merge_messages_received(pp, s)

    counts = min_max_split(layers, pp, pace)
    bounds = stages_mod.stage_bounds(counts)
    forward_s = [sum(f_unit[i:j]) for i, j in bounds]
    backward_s = [sum(b_unit[i:j]) for i, j in bounds]
    schedule = one_f_one_b(pp, microbatches)
    events = simulate(schedule, pp_cost.stage_durations(schedule, forward_s, backward_s), message,
                      charged="sender" if cfg.clock.paced else "receiver")  # as the link does
    pipeline = max(e["t1"] for e in events) - min(e["t0"] for e in events)
    tie_s = core_cost.all_reduce_time(mc.vocab_size * mc.n_embd * FP32_BYTES, 2, alpha, beta) \
        if cfg.model == "gpt" and pp > 1 else 0.0
    sync_s, opt_s = [], []
    for s, (i, j) in enumerate(bounds):
        numel = sum(u.numel for u in units[i:j])
        sync_s.append(core_cost.all_reduce_time(numel * FP32_BYTES, dp, alpha, beta)
                      + (tie_s if s in (0, pp - 1) else 0.0))
        opt_s.append(sum(clock.price(u.optimizer) for u in units[i:j]))
    return Candidate(Layout(dp, pp, microbatches, tuple(counts), rows), tuple(forward_s),
                     tuple(backward_s), tuple(pace(s, i, j) for s, (i, j) in enumerate(bounds)),
                     message, pipeline, tuple(sync_s), tuple(opt_s),
                     cost.merge_step_time(pipeline, sync_s, opt_s))


def candidates(cfg) -> list[Candidate]:
    """Every merge the configuration allows, fewest stages first: k | world_size stages (only
    `pp=` if given), k <= layers, the replicas' rows divisible by dp × m. ValueError names the
    values when none is left."""
    o, world, layers = cfg.options, cfg.world_size, n_layers(cfg)
    fixed, m_given = o.get("pp"), o.get("microbatches")
    if fixed is not None:
        if world % fixed:
            raise ValueError(f"pp={fixed} does not divide world_size={world}")
        if fixed > layers:
            raise ValueError(f"pp={fixed} stages > {layers} layers (model={cfg.model!r}, "
                             f"n_layer={cfg.model_config.n_layer}): more stages than layers")
    out, refused = [], []
    for k in ([fixed] if fixed is not None else range(1, min(world, layers) + 1)):
        if world % k:
            continue
        dp = world // k
        if cfg.batch_size % dp:
            refused.append(f"pp={k}: batch_size={cfg.batch_size} is not divisible by dp={dp}")
            continue
        rows = cfg.batch_size // dp
        m = m_given if m_given is not None else default_microbatches(rows, k)
        if rows % m:
            refused.append(f"pp={k}: batch_size={cfg.batch_size} is not divisible by dp={dp} × "
                           f"microbatches={m}")
            continue
        out.append(evaluate(cfg, k, dp, m))
    if not out:
        raise ValueError("no merge fits: " + "; ".join(refused))
    return out


_PLANS: dict = {}


def plan(cfg) -> Candidate:
    """The merge with the smallest modelled step time (ties: the fewer stages, fewer messages)."""
    key = (cfg.model, cfg.model_config, cfg.seed, cfg.optimizer, cfg.world_size, cfg.batch_size,
           cfg.options.get("pp"), cfg.options.get("microbatches"), link_of(cfg),
           cfg.clock)
    if key not in _PLANS:
        _PLANS[key] = min(candidates(cfg), key=lambda c: c.step_s)  # first minimum: fewest stages
    return _PLANS[key]
