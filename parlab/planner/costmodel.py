"""Predicted step time, peak memory per rank and bytes per dimension of any `Plan`.

A blocking α-β model, not MAD-Max's replay: measured per-layer compute (`profile`), a message
model per collective (chapter 00's α-β fit, Thakur et al. 2005) and each chapter's closed forms
for what moves, composed on one step's critical path. MAD-Max (Hsia et al., ISCA 2024, §4) instead
replays a traced iteration with compute and communication on their own streams:
`parlab.planner.trace_replay`, across plans `parlab.planner.whatif`. The step is

    step = slots · (compute per micro-batch + tp, cp and pp messages per micro-batch)
           + dp / ZeRO gradient and parameter collectives + optimizer,

where the dp messages are the plan's own reducer's (chapter 01's `REDUCER_MESSAGES`: one flat
bucket, one per tensor or one per bucket, each paying its α; the overlapped one hidden behind the
last micro-batch's backward up to its last bucket) or its compressor's (chapter 08's
`step_messages`: an all-gather of packed bytes, PowerSGD's two all-reduces; the encoding's compute
is not priced). Every message list here is a chapter's, so its bytes are the composed closed forms
(`message_bytes` = `predict_bytes`, tested for every plan).

with slots = m + pp − 1 for GPipe and 1F1B (equal stages: Huang et al., NeurIPS 2019, §2.3;
Narayanan et al., SC 2021, §2.2.1), so the bubble is (pp − 1)/(m + pp − 1) of the pipelined part.
Every message here is blocking (the schemes wait for it), so the exposed communication is all of
it; MAD-Max's exposed-communication fraction is exposed seconds / step seconds.

In paced time (`clock=` a paced `parlab.core.clock.Clock`, the chapter's default "A100"), compute
comes from `parlab.planner.paced.profile` (operators and FLOPs counted, priced as the paced clock
prices a span) and a message costs what the real link takes (`pace_link`): every time is the
accelerator's seconds. On the wall clock a message costs the larger of
what gloo takes on this machine (the fit) and what the emulated link takes (`parlab.core.link`:
it only ever slows a message down; `parlab.data_parallel.cost.message_time` takes the same max),
and compute is stretched when more ranks compute than there are cores: every rank is a process
on this machine.

Memory per rank: `parlab.planner.plan_memory` (re-exported here).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace

from parlab.compression.compressed_reducers import step_messages
from parlab.compression.cost import RING
from parlab.core.cost import FP32_BYTES, round_up, shard_sizes
from parlab.data_parallel.cost import REDUCER_ISSUE, REDUCER_MESSAGES
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

FP32 = FP32_BYTES


@dataclass(frozen=True)
class Message:
    """`count` messages of one kind per rank and step: op over a group of `n` of `elements` fp32."""

    dim: str  # "dp", "tp", "pp", "cp", "tie"
    op: str  # all_reduce, reduce_scatter (full tensor given), all_gather (full tensor), p2p
    n: int
    elements: int
    count: float
    pipelined: bool  # inside the pipeline's slots (per micro-batch) or once per step
    element_bytes: int = FP32  # 1: a compressor's packed bytes

    def sent(self) -> int:
        """Bytes the busiest rank of the ring sends per message (ring counts, `parlab.core.cost`:
        with uneven chunks a rank sends all but the chunk it receives last, so the rank before
        the smallest chunk's owner sends most — the same rank for every message)."""
        if self.op == "p2p":
            return self.elements * self.element_bytes
        return max(RING[self.op](self.elements, self.n, r)[0]
                   for r in range(self.n)) * self.element_bytes

    def rounds(self) -> int:
        if self.op == "p2p":
            return 1
        return 2 * (self.n - 1) if self.op == "all_reduce" else self.n - 1


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
    """What a rank of pipeline `stage` sends per step, per dimension (the chapters' closed
    forms): tp 4 all-reduces per block (Megatron, Shoeybi et al. 2019 §3; one more recomputed
    with checkpointing), cp the ring's K/V and dK/dV passes (Liu et al. 2023 §3), pp one
    activation down and one gradient back per micro-batch and boundary (Narayanan et al. 2021
    §2.2), the tied embedding summed over first and last stage, and dp × cp the plan's reducer's
    messages (chapter 01), its compressor's (chapter 08) or ZeRO's collectives per unit
    (Rajbhandari et al. SC 2020 §7.2.2)."""
    out = []
    rows = batch_size // (plan.dp * plan.microbatches)
    seq = m.block_size // plan.cp
    blocks = max(shard_sizes(m.n_layer, plan.pp))
    act = rows * seq * m.n_embd  # (b, T/cp, C) elements
    if plan.tp > 1:  # Megatron: 2 all-reduces forward, 2 backward per block (+1 recomputed)
        per_mb = blocks * (4 + (1 if plan.checkpoint else 0))
        out.append(Message("tp", "all_reduce", plan.tp, act, per_mb, True))
    if plan.cp > 1:  # ring attention: K, V cp−1 times forward, dK, dV cp−1 times back
        kv = 2 * act // plan.tp
        passes = 2 * (plan.cp - 1) * (1.5 if plan.checkpoint else 1)
        out.append(Message("cp", "p2p", plan.cp, kv, blocks * passes, True))
    first, last = stage == 0, stage == plan.pp - 1
    if plan.pp > 1:  # an activation down and a gradient back per micro-batch and boundary
        out.append(Message("pp", "p2p", 2, act, 2 - first - last, True))
        if first or last:
            out.append(Message("tie", "all_reduce", 2, m.vocab_size * m.n_embd, 1, False))
    group = plan.dp * plan.cp  # every rank holding the same slice (dp × cp)
    if group > 1:
        units = stage_numels(m, plan, stage)
        if plan.zero:  # ZeRO per unit: reduce-scatter, all-gather (×2 at stage 3), §7.2.2
            for unit in units.values():
                if unit:
                    padded = round_up(sum(unit), group)
                    out.append(Message("dp", "reduce_scatter", group, padded, 1, False))
                    out.append(Message("dp", "all_gather", group, padded,
                                       2 if plan.zero == 3 else 1, False))
        elif plan.dp_compressor != "none":  # chapter 08's messages for this compressor
            shapes = dp_param_shapes(plan, m, stage)
            out += [Message("dp", op, group, elements, 1, False, width) for op, elements, width
                    in step_messages(plan.dp_compressor, shapes, group, plan.compressor_options())
                    if elements]
        else:  # chapter 01's reducer: one flat bucket, one message per tensor or per bucket
            sync = REDUCER_MESSAGES[plan.dp_sync]  # an all-gather's message is its full tensor
            out += [Message("dp", op, group, elements * (group if op == "all_gather" else 1), 1,
                            False) for op, elements in
                    sync(dp_param_numels(plan, m, stage), group, plan.reducer_options())]
    return out


def bytes_per_dim(msgs: list[Message], microbatches: int) -> dict:
    """{dim: bytes sent per step} of one rank's messages."""
    out: dict = {}
    for x in msgs:
        out[x.dim] = out.get(x.dim, 0) + int(x.sent() * x.count *
                                             (microbatches if x.pipelined else 1))
    return out


def message_time(msg: Message, fit, link) -> float:
    """max(gloo here, emulated link) of one message: k·α + bytes/β each (Thakur et al. 2005)."""
    if msg.n == 1:
        return 0.0
    if fit is None:  # virtual time: the real link alone, gloo's real time is no virtual time
        here = 0.0
    elif msg.op == "p2p" and msg.dim == "cp":  # posted async round the ring
        here = fit.ring_alpha + msg.sent() / fit.ring_beta
    elif msg.op == "p2p":
        here = fit.p2p_alpha + msg.sent() / fit.p2p_beta
    else:
        ab = fit.all_reduce.get(msg.n) or fit.all_reduce[max(fit.all_reduce)]
        scale = 0.5 if msg.op != "all_reduce" else 1.0  # RS / AG: half a ring all-reduce
        here = scale * ab.predict(msg.elements * msg.element_bytes)
    emulated = link.cost(msg.sent(), msg.rounds()) if link is not None else 0.0
    return max(here, emulated)


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
    per_mb_comm = sum(message_time(x, fit, link) * x.count for x in msgs
                      if x.pipelined and x.dim not in ("pp", "cp"))
    per_step_comm = sum(message_time(x, fit, link) * x.count for x in msgs
                        if not x.pipelined and x.dim != "dp")
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
