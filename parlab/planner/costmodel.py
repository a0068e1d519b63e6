"""Predicted step time, peak memory per rank and bytes per dimension of any `Plan`.

A blocking α-β model, not MAD-Max's replay: measured per-layer compute (`profile`), each
chapter's message list composed (`messages`, `parlab.core.messages`: bytes their sum, time α-β
over the same list: Thakur et al. 2005), on one step's critical path. MAD-Max (Hsia et al., ISCA
2024, §4) instead replays a traced iteration with compute and communication on their own streams:
`parlab.planner.trace_replay`, across plans `parlab.planner.whatif`. The step is

    step = slots · (compute per micro-batch + tp, cp and pp messages per micro-batch)
           + dp / ZeRO gradient and parameter collectives + optimizer,

with slots = m + pp − 1 for GPipe and 1F1B (Huang et al., NeurIPS 2019, §2.3; Narayanan et al.,
SC 2021, §2.2.1). The dp messages are the plan's reducer's, compressor's or ZeRO's; an
overlapped reducer's hide behind backward (`dp_exposed`). Every other message is blocking, so
MAD-Max's exposed-communication fraction is exposed seconds / step seconds. Paced and wall-clock
pricing of a message and compute: docs/messages.md. Memory per rank: `parlab.planner.plan_memory`
(re-exported here).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace

from parlab.compression.compressed_reducers import step_messages
from parlab.compression.cost import as_messages
from parlab.context_parallel.cost import ring_messages
from parlab.core.cost import FP32_BYTES, shard_sizes
from parlab.core.messages import (  # noqa: F401  (re-exported: costmodel.Message, ...)
    Message,
    alpha_beta_time,
    bytes_per_dim,
    merged,
    message_time,
)
from parlab.data_parallel.cost import REDUCER_ISSUE, REDUCER_MESSAGES, dp_messages
from parlab.pipeline.cost import p2p_messages, tie_messages
from parlab.planner.calibration import Calibration, fit_calibration  # noqa: F401  (re-exported)
from parlab.planner.cost import DIMENSION, dp_param_numels, dp_param_shapes, rank_bytes
from parlab.planner.plan_memory import (  # noqa: F401  (re-exported: costmodel.memory, ...)
    activation_memory,
    block_tensor_numels,
    memory,
    ring_attention_extra,
    stage_numels,
    state_memory,
)
from parlab.tensor_parallel.cost import tp_messages
from parlab.zero.cost import zero_messages

FP32 = FP32_BYTES


@dataclass
class PlanPrediction:
    plan: object
    step_s: float
    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    bubble_fraction: float
    memory: dict  # the peak rank's bytes: params, grads, optimizer, activations, total
    bytes_per_dim: dict  # bytes the busiest rank sends per step, by dimension
    messages: list = field(repr=False, default_factory=list)
    raw_compute_s: float = 0.0  # before calibration
    raw_comm_s: float = 0.0

    @property
    def exposed_fraction(self) -> float:
        """MAD-Max's exposed-communication fraction: communication not hidden ÷ step time."""
        return self.exposed_comm_s / self.step_s if self.step_s > 0 else 0.0

    def row(self) -> dict:
        return {"plan": self.plan.describe(), "step_ms": 1e3 * self.step_s,
                "compute_ms": 1e3 * self.compute_s, "exposed_comm_ms": 1e3 * self.exposed_comm_s,
                "bubble": self.bubble_fraction, "exposed_fraction": self.exposed_fraction,
                "peak_MB": self.memory["total"] / 1e6,
                "bytes_per_step": sum(self.bytes_per_dim.values())}


# ----------------------------------------------------------------------------- layout
def messages(m, plan, batch_size: int, stage: int = 0) -> list[Message]:
    """What a rank of pipeline `stage` sends per step: each dimension's chapter's message list on
    the slice that dimension sees (Narayanan et al. 2021, §3) — tp `tp_messages` (Shoeybi et al.
    2019 §3), cp `ring_messages` (Liu et al. 2023 §3), pp `p2p_messages` (Narayanan et al. 2021
    §2.2) and the tied embedding's `tie_messages`, and over dp × cp the plan's ZeRO collectives
    (`zero_messages`, Rajbhandari et al. SC 2020 §7.2.2), compressor's (chapter 08) or reducer's
    (chapter 01, `dp_messages`). The busiest stage's block count is every stage's (the time
    model's critical path)."""
    rows = batch_size // (plan.dp * plan.microbatches)
    seq = m.block_size // plan.cp
    blocks = max(shard_sizes(m.n_layer, plan.pp))
    act = rows * seq * m.n_embd  # (b, T/cp, C) elements
    stage_slice = SimpleNamespace(n_layer=blocks, block_size=seq, n_embd=m.n_embd)
    out = merged(tp_messages(stage_slice, rows, plan.tp, checkpoint=plan.checkpoint,
                             pipelined=True))
    out += merged(ring_messages(rows, m.n_head // plan.tp, m.block_size, m.head_dim, plan.cp,
                                blocks, recompute="checkpoint" if plan.checkpoint else "none",
                                pipelined=True))
    out += merged(p2p_messages(plan.pp, 1, stage, act))
    out += tie_messages(m.vocab_size, m.n_embd, plan.pp, stage)
    group = plan.dp * plan.cp  # every rank holding the same slice (dp × cp)
    if group > 1:
        if plan.zero:
            units = [sum(u) for u in stage_numels(m, plan, stage).values()]
            out += merged(zero_messages(plan.zero, units, group))
        elif plan.dp_compressor != "none":
            shapes = dp_param_shapes(plan, m, stage)
            out += as_messages([t for t in step_messages(plan.dp_compressor, shapes, group,
                                                         plan.compressor_options()) if t[1]],
                               group)
        else:
            out += dp_messages(REDUCER_MESSAGES[plan.dp_sync], dp_param_numels(plan, m, stage),
                               group, **plan.reducer_options())
    return out


# ----------------------------------------------------------------------------- time
def dp_exposed(msgs: list[Message], plan, backward_s: float, fit, link,
               forward_s: float = 0.0) -> float:
    """Seconds of the dp × cp gradient messages left on the critical path: all of them when the
    reducer issues after backward; an overlapped reducer's buckets leave from backward's hooks
    (WFBP: Zhang et al., Poseidon, ATC 2017) during the last micro-batch's backward, which hides
    up to that backward — at least the last bucket, ready only when backward ends, stays exposed.
    DeAR (Zhang et al., ICDCS 2023, §3) splits the all-reduce: its reduce-scatters leave from
    the hooks the same way, and its all-gathers are waited bucket by bucket in the next step's
    first forward, which hides them up to that forward — at least the one its first layers need.
    P3's partitions (Jayarajan et al., SysML 2019) leave front layers first and each bucket's
    update waits for its own in the next forward: priced as all sent after backward and hidden
    behind that forward up to the longest message — a simplification on both sides (the credit
    released during backward is not counted; the first layers' whole bucket, not one partition,
    must arrive before they run). (DeAR's too: the link is taken to be free for the all-gathers
    once backward ends.)"""
    if not msgs:
        return 0.0

    def hidden_behind(times: list[float], compute_s: float) -> float:
        return max(times[-1], sum(times) - compute_s) if times else 0.0

    times = [message_time(x, fit, link) * x.count for x in msgs]
    issue = "after-backward" if plan.zero or plan.dp_compressor != "none" else \
        REDUCER_ISSUE[plan.dp_sync]
    if issue == "hooks":
        return hidden_behind(times, backward_s)
    if issue == "reduce-scatter":
        scatters = [t for t, x in zip(times, msgs) if x.op == "reduce_scatter"]
        gathers = [t for t, x in zip(times, msgs) if x.op == "all_gather"]
        return hidden_behind(scatters, backward_s) + hidden_behind(gathers, forward_s)
    if issue == "priority":
        return max(max(times), sum(times) - forward_s)
    return sum(times)


def compute_per_microbatch(m, plan, profile, batch_size: int) -> tuple[float, float]:
    """(forward, backward) seconds of one micro-batch on the busiest stage, unstretched."""
    from parlab.planner.profile import block_flops, outside_flops
    rows = batch_size // (plan.dp * plan.microbatches)
    seq = m.block_size // plan.cp
    flops = block_flops(rows, seq, m.n_embd, keys=m.block_size) / plan.tp
    blocks = max(shard_sizes(m.n_layer, plan.pp))
    fwd = blocks * profile.block_fwd(flops)
    bwd = blocks * profile.block_bwd(flops)
    out = outside_flops(rows, seq, m.n_embd, m.vocab_size)
    fwd += profile.outside_fwd(out) if plan.pp == 1 else profile.outside_fwd(out) / 2
    bwd += profile.outside_bwd(out) if plan.pp == 1 else profile.outside_bwd(out) / 2
    if plan.cp > 1:  # ring attention merges 2cp+1 score blocks per rank, not 1 (zigzag)
        extra = blocks * 2 * plan.cp * profile.attn_chunk_s
        fwd, bwd = fwd + extra / 3, bwd + 2 * extra / 3  # backward ≈ 2 × forward
    if plan.checkpoint:
        bwd += fwd - (profile.outside_fwd(out) if plan.pp == 1 else 0)  # recomputed forward
    return fwd, bwd


def predict(plan, cfg_model, profile, fit, link=None, batch_size: int = 12,
            calibration: Calibration | None = None, clock=None) -> PlanPrediction:
    """Predicted step, peak memory and bytes of `plan` for the GPT `cfg_model` (see module doc).

    profile: `parlab.planner.profile.measure` (paced: `parlab.planner.paced.profile`); fit:
    `calibrate_comm(world_size)` (paced: None); link: an emulated `parlab.core.link.Link`, a
    preset name or None (loopback); calibration: `fit_calibration` of measured plans (None: the
    raw model); clock: the paced `Clock` of the runs predicted (None: the wall clock), whose
    real link the messages then cost — the step is then in the accelerator's seconds."""
    from parlab.core.clock import pace_link
    from parlab.core.link import resolve
    if fit is not None and plan.world_size > 1 and fit.world_size != plan.world_size:
        raise ValueError(f"fit.world_size={fit.world_size} was measured for another world size "
                         f"than plan {plan.describe()} (world_size={plan.world_size})")
    link = resolve(link)
    if clock is not None and clock.paced:  # the link the paced run prices: the real one
        link = pace_link(link, clock)
    cal = calibration or Calibration()
    m = cfg_model
    # time: stage 0's messages, a micro-batch crossing each boundary twice on the critical path
    msgs = [dataclasses.replace(x, count=2) if x.dim == "pp" else x
            for x in messages(m, plan, batch_size, 0)]
    fwd, bwd = compute_per_microbatch(m, plan, profile, batch_size)
    slots = plan.microbatches + plan.pp - 1
    bubble = (plan.pp - 1) / slots  # GPipe and 1F1B alike (Narayanan et al. 2021 §2.2.1)
    active = plan.world_size * (1 - bubble)
    stretch = max(1.0, active / profile.cores)  # ranks beyond the cores share them
    units = stage_numels(m, plan, 0)
    tensors = sum(len(u) for u in units.values())
    elements = sum(sum(u) for u in units.values())
    if plan.zero and plan.dp * plan.cp > 1:  # the optimizer updates one flat shard per unit
        elements = elements / (plan.dp * plan.cp)
        tensors = sum(1 for u in units.values() if u)
    opt = profile.optimizer(tensors, elements) * stretch
    per_mb_comm = alpha_beta_time([x for x in msgs if x.pipelined and x.dim not in ("pp", "cp")],
                                  fit, link)
    per_step_comm = alpha_beta_time([x for x in msgs if not x.pipelined and x.dim != "dp"],
                                    fit, link)
    per_step_comm += dp_exposed([x for x in msgs if x.dim == "dp"], plan, bwd * stretch, fit, link,
                                fwd * stretch)
    raw_compute = slots * (fwd + bwd) * stretch + opt  # the bubble is idle compute slots
    raw_comm = slots * per_mb_comm + per_step_comm  # every blocking message is exposed
    for x in msgs:
        if x.dim == "cp":  # posted before a ring step's block attention, waited after: the link
            # overlaps that attention only (one more score block merged: `attn_chunk_s`), not the
            # block's projections and MLP
            per_pass = profile.attn_chunk_s * stretch
            exposed = max(message_time(x, fit, None), message_time(x, fit, link) - per_pass)
            raw_comm += slots * x.count * exposed
        elif x.dim == "pp":  # the sender waits out the link; the receiver computes meanwhile:
            # 2(p−1) messages fill and drain the pipeline (gloo's time only), the 2(m−1) of the
            # steady state keep the sender from its next micro-batch (the link's time too)
            raw_comm += (2 * (plan.pp - 1) * message_time(x, fit, None)
                         + 2 * (plan.microbatches - 1) * message_time(x, fit, link))
    compute = cal.compute_scale * raw_compute
    comm = cal.comm_scale * raw_comm
    step = compute + comm + cal.overhead_s
    per_dim = predict_bytes(plan, m, batch_size)
    out = PlanPrediction(plan, step, compute, comm, bubble * (compute + comm), bubble,
                     memory(m, plan, batch_size), per_dim, msgs)
    out.raw_compute_s, out.raw_comm_s = raw_compute, raw_comm
    return out


def predict_bytes(plan, cfg_model, batch_size: int = 12) -> dict:
    """{dim: bytes per step} of the busiest rank (no profile, no fit needed): the chapters' closed
    forms composed, `parlab.planner.cost.rank_bytes` (the tied embedding's all-reduce as "tie")."""
    cfg = SimpleNamespace(model_config=cfg_model, batch_size=batch_size, steps=1)
    dims = {**DIMENSION, "embed-tie": "tie"}
    per_rank = []
    for rank in range(plan.world_size):
        out: dict = {}
        for phase, sent in rank_bytes(plan, cfg, rank, 1).items():
            if sent:
                out[dims[phase]] = out.get(dims[phase], 0) + sent
        per_rank.append(out)
    return max(per_rank, key=lambda d: sum(d.values()))


def message_bytes(plan, cfg_model, batch_size: int = 12) -> dict:
    """{dim: bytes per step} that the time model's message list (`messages`) carries on the
    busiest stage: `predict_bytes`'s closed forms, message by message (checked equal by
    `parlab.planner.explore.closed_form_table`)."""
    return max((bytes_per_dim(messages(cfg_model, plan, batch_size, s), plan.microbatches)
                for s in range(plan.pp)), key=lambda d: sum(d.values()))
