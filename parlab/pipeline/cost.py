"""What a pipeline should cost: bubble fractions in closed form, ideal timelines of any schedule,
the bubble measured in a real run, and the bytes a pipeline sends.

Bubble fraction = idle share of p ranks × the step's pipeline span. With equal stages, forward f
and backward b per micro-batch, GPipe and 1F1B idle (p−1)(f+b) of (m+p−1)(f+b) per rank:
(p−1)/(m+p−1) (Huang et al., GPipe, NeurIPS 2019, §2.3; Narayanan et al., SC 2021, §2.2.1).
Interleaving v chunks per rank shrinks each bubble slot v-fold: (p−1)/(v·m+p−1) (Narayanan et al.,
SC 2021, §2.2.2). ZB-H1 leaves (p−1)(F+B−W) instead of (p−1)(F+B+W), with B the input and W the
weight gradient: (p−1)/(3m+p−1) when F = B = W (Qi et al., ICLR 2024, §3.1). AlpaComm's eager
1F1B has 1F1B's bubble when messages are free; with a message latency L ≤ f it pays L only at the
pipeline's fill and drain, 2(p−1)L per step, where 1F1B pays it in the steady state too (Zhuang et
al., "On Optimizing the Communication of Model Parallelism", MLSys 2023, §4): `eager_step_time`.

Activations in flight (micro-batches whose forward ran and backward did not) at pipeline rank r:
GPipe m, 1F1B min(p−r, m), eager 1F1B min(2(p−r)−1, m) — `in_flight_peak`.

`ideal_timeline` simulates the very action lists that run (`validate.simulate`) with given
per-stage costs, so uneven stages, message latency and any schedule get their ideal Gantt chart
and bubble without a formula.

Bytes: each of the m micro-batches crosses every stage boundary twice — its activation forward,
its gradient back — each of mb·T·C fp32 numbers for the GPT. With v chunks per rank a rank owns v
stages, so it sends (2v − [first rank] − [last rank])·m messages per step: interleaving multiplies
point-to-point traffic by v (Narayanan et al., SC 2021, §2.2.2).

DualPipe's closed forms (DeepSeek-V3 report, Table 2): `parlab.pipeline.cost_dualpipe`.
"""

from __future__ import annotations

import math
import statistics

from parlab.core.messages import Message, total_bytes
from parlab.pipeline.schedules import Schedule
from parlab.pipeline.validate import simulate


def theory_bubble(name: str, p: int, m: int, v: int = 1) -> float:
    """Closed-form bubble fraction of a schedule with equal stages and F = B = W."""
    if name == "naive":
        return (p - 1) / p
    if name in ("gpipe", "1f1b", "eager-1f1b"):
        return (p - 1) / (m + p - 1)
    if name in ("interleaved", "looped-bfs"):  # looped-bfs: m >= p (Lamy-Poirier 2023)
        return (p - 1) / (v * m + p - 1)
    if name == "zb":
        return (p - 1) / (3 * m + p - 1)
    if name == "zbv":  # m >= 2p−1; v = 2 chunks each half a stage (`parlab.pipeline.zbv`)
        return (p - 1) / (6 * m + p - 1)
    raise ValueError(f"schedule={name!r} has no closed-form bubble")


def in_flight_peak(name: str, p: int, m: int, rank: int) -> int:
    """Most micro-batches whose activations pipeline rank `rank` holds at once (one chunk)."""
    peaks = {"naive": 1, "gpipe": m, "1f1b": min(p - rank, m),
             "eager-1f1b": min(2 * (p - rank) - 1, m)}
    if name not in peaks:
        raise ValueError(f"schedule={name!r} has no closed-form in-flight peak; "
                         f"choose one of {sorted(peaks)}")
    return peaks[name]


def eager_step_time(p: int, m: int, forward: float, backward: float, latency: float) -> float:
    """Eager 1F1B's ideal step with equal stages: (m+p−1)(f+b) + 2(p−1)L, valid for L ≤ f — each
    activation was sent a forward before it is needed, so only the fill (down) and drain (back)
    wait for messages (Zhuang et al., MLSys 2023, §4)."""
    if latency > forward:
        raise ValueError(f"latency={latency} > forward={forward}: the closed form needs L <= f")
    return (m + p - 1) * (forward + backward) + 2 * (p - 1) * latency


def stage_durations(schedule: Schedule, forward: list[float] | float = 1.0,
                    backward: list[float] | float | None = None, weight_share: float = 0.5):
    """duration(action) from per-stage forward / backward seconds (scalars: every stage the same).

    `backward` is the whole backward (default 2 × forward); a split schedule spends
    `weight_share` of it in W and the rest in B.
    """
    n = schedule.stages
    fwd = forward if isinstance(forward, list) else [forward] * n
    if backward is None:
        backward = [2 * f for f in fwd]
    bwd = backward if isinstance(backward, list) else [backward] * n

    def duration(a):
        if a.op == "F":
            return fwd[a.stage]
        if not schedule.split_backward:
            return bwd[a.stage]
        return bwd[a.stage] * (weight_share if a.op == "W" else 1 - weight_share)
    return duration


def ideal_timeline(schedule: Schedule, forward=1.0, backward=None, latency: float = 0.0,
                   weight_share: float = 0.5) -> list[dict]:
    """The schedule's events in simulated time (`parlab.core.trace` format, seconds)."""
    return simulate(schedule, stage_durations(schedule, forward, backward, weight_share), latency)


def bubble_of(events: list[dict]) -> float:
    """1 − busy / (ranks × span) over compute events."""
    ranks = {e["rank"] for e in events}
    span = max(e["t1"] for e in events) - min(e["t0"] for e in events)
    busy = sum(e["t1"] - e["t0"] for e in events)
    return 1.0 - busy / (len(ranks) * span) if span > 0 else 0.0


def ideal_bubble(schedule: Schedule, forward=1.0, backward=None, latency: float = 0.0,
                 weight_share: float = 0.5) -> float:
    return bubble_of(ideal_timeline(schedule, forward, backward, latency, weight_share))


def pipeline_events(timeline: list[dict], step: int | None = None) -> list[dict]:
    """The F / B / W compute events of a run's timeline (of one step if given)."""
    return [e for e in timeline if e["kind"] == "compute" and e["name"] in ("F", "B", "W")
            and (step is None or e["args"].get("step") == step)]


def measured_bubbles(timeline: list[dict]) -> list[float]:
    """Bubble fraction of each step of a run: idle share of the pipeline span of that step."""
    steps = sorted({e["args"]["step"] for e in pipeline_events(timeline)})
    return [bubble_of(pipeline_events(timeline, s)) for s in steps]


def measured_bubble(timeline: list[dict], skip_first: bool = True, stat: str = "median") -> float:
    """The median (or least, `stat="min"`) step bubble, leaving out the first step (warm-up).

    On a machine shared with other jobs a burst of interference stalls one rank and its neighbour
    idles: noise mostly adds bubble, so the least-disturbed step ("min") is the cleaner estimate
    of the schedule's own bubble; the median is what a user of this machine sees.
    """
    values = measured_bubbles(timeline)
    if skip_first and len(values) > 1:
        values = values[1:]
    return min(values) if stat == "min" else statistics.median(values)


def stage_compute(timeline: list[dict], skip_first: bool = True) -> dict:
    """Median seconds of one F, B and W per stage, measured: {stage: {"F": s, "B": s, "W": s}}."""
    out: dict = {}
    for e in pipeline_events(timeline):
        if skip_first and e["args"].get("step") == 0:
            continue
        out.setdefault(e["args"]["stage"], {}).setdefault(e["name"], []).append(e["t1"] - e["t0"])
    return {s: {op: statistics.median(v) for op, v in ops.items()} for s, ops in sorted(out.items())}


def p2p_messages_per_step(pp: int, chunks: int, microbatches: int, pp_rank: int) -> int:
    """Sends per step of pipeline rank `pp_rank`: (2v − [rank 0] − [rank p−1])·m, 0 if p = 1."""
    if pp == 1:
        return 0
    return (2 * chunks - (pp_rank == 0) - (pp_rank == pp - 1)) * microbatches


def p2p_messages(pp: int, chunks: int, pp_rank: int, boundary_numel: int, itemsize: int = 4,
                 pipelined: bool = True) -> list[Message]:
    """One micro-batch's sends of pipeline rank `pp_rank` (Narayanan et al. 2021, §2.2): per chunk
    its activation down (not from the last stage) and its gradient back (not from the first)."""
    if pp == 1:
        return []
    down, back = chunks - (pp_rank == pp - 1), chunks - (pp_rank == 0)
    return [Message("pp", "p2p", 2, boundary_numel, count, pipelined, itemsize, phase)
            for count, phase in ((down, "pp-fwd"), (back, "pp-bwd")) if count]


def tie_messages(vocab_size: int, n_embd: int, pp: int, pp_rank: int) -> list[Message]:
    """The tied embedding's gradient all-reduce, (V, C) fp32 over the first and last stage, once
    per step (Press & Wolf 2017's tie across a pipeline: `parlab.pipeline.split.EmbeddingTie`)."""
    if pp == 1 or pp_rank not in (0, pp - 1):
        return []
    return [Message("tie", "all_reduce", 2, vocab_size * n_embd, phase="embed-tie")]


def p2p_bytes_per_step(pp: int, chunks: int, microbatches: int, pp_rank: int,
                       boundary_numel: int, itemsize: int = 4) -> int:
    """Bytes one pipeline rank sends per step: `p2p_messages` of m micro-batches summed."""
    return total_bytes(p2p_messages(pp, chunks, pp_rank, boundary_numel, itemsize), microbatches)


def ideal_from_measured(schedule: Schedule, timeline: list[dict], latency: float = 0.0,
                        overhead: float = 0.0, charged: str = "sender"):
    """The schedule's ideal timeline with each stage's measured median F, B and W times, each
    compute action lengthened by `overhead` seconds (its sends, receives and bookkeeping).

    `charged`: where a message's latency is paid (`validate.simulate`): "sender" (a wire, as
    virtual time's link charges it, `parlab.core.virtual_link`) or "receiver" (from the receive's
    post: a rendezvous).

    What the schedule would do on this machine if nothing but compute took time: the gap between
    its bubble and the measured one is messages, overhead and — with more ranks than cores —
    ranks waiting for a core.
    """
    times = stage_compute(timeline)
    fwd = [times[s]["F"] for s in range(schedule.stages)]
    bwd = [times[s]["B"] + times[s].get("W", 0.0) for s in range(schedule.stages)]

    def duration(a):
        if a.op == "F":
            return fwd[a.stage] + overhead
        return (times[a.stage][a.op] if schedule.split_backward else bwd[a.stage]) + overhead
    return simulate(schedule, duration, latency, charged)


def measured_action_overhead(timeline: list[dict], skip_first: bool = True) -> float:
    """Median seconds per compute action that a rank spent neither computing nor waiting for a
    message, between its first and last action of a step: posting sends and receives, the
    executor's bookkeeping, and (with no spare core) waiting to be scheduled."""
    per: list[float] = []
    for (step, rank), actions in _by_step_and_rank(pipeline_events(timeline)).items():
        if skip_first and step == 0:
            continue
        t0, t1 = min(e["t0"] for e in actions), max(e["t1"] for e in actions)
        waiting = sum(w["t1"] - w["t0"] for w in timeline if w["rank"] == rank
                      and w["kind"] == "wait" and w["name"].startswith("wait recv")
                      and t0 <= w["t0"] and w["t1"] <= t1)
        computing = sum(e["t1"] - e["t0"] for e in actions)
        per.append(max(0.0, t1 - t0 - computing - waiting) / len(actions))
    return statistics.median(per) if per else 0.0


def bubble_with_overhead(schedule: Schedule, timeline: list[dict], latency: float,
                         overhead: float) -> float:
    """The bubble the measurement would show if the ideal schedule's actions each cost `overhead`
    outside compute and each message `latency`: idle over span, with the overhead idle (as the
    measured bubble counts it)."""
    events = ideal_from_measured(schedule, timeline, latency, overhead)
    ranks = {e["rank"] for e in events}
    span = max(e["t1"] for e in events) - min(e["t0"] for e in events)
    computing = sum(e["t1"] - e["t0"] - overhead for e in events)
    return 1.0 - computing / (len(ranks) * span) if span > 0 else 0.0


def _by_step_and_rank(events: list[dict]) -> dict:
    out: dict = {}
    for e in events:
        out.setdefault((e["args"]["step"], e["rank"]), []).append(e)
    return out


def measured_message_latency(ledger: list[dict]) -> float:
    """Median delay of a pipeline message: the receiver's end minus the later of the send's start
    and the moment the receiver asked for it (its wait; a receive the executor posted ahead
    was asked for only then), pairing the k-th send on each (phase, src, dst) channel with the
    k-th receive (channels are FIFO). All ranks read the same monotonic clock, so this is
    measured, not modelled; on a loaded machine it includes the receiver's wait for a core."""
    sends: dict[tuple, list] = {}
    recvs: dict[tuple, list] = {}
    for r in ledger:
        if r["phase"] in ("pp-fwd", "pp-bwd") and r["op"] in ("send", "recv"):
            src, dst = (r["rank"], r["peers"][0]) if r["op"] == "send" else (r["peers"][0], r["rank"])
            (sends if r["op"] == "send" else recvs).setdefault((r["phase"], src, dst), []).append(r)
    delays = [r["t_end"] - max(s["t_start"], r.get("t_wait", r["t_start"]))
              for key, ss in sends.items() for s, r in zip(ss, recvs.get(key, []))]
    return statistics.median(delays) if delays else 0.0


def held_peak(schedule: Schedule, rank: int, stage_bytes: dict) -> int:
    """Most activation bytes `rank` holds along its list: an F adds its stage's bytes per
    micro-batch (`stage_bytes`), the backward that frees them (W if split, else B) removes them."""
    free = "W" if schedule.split_backward else "B"
    held = peak = 0
    for a in schedule.actions[rank]:
        if a.op == "F":
            held += stage_bytes[a.stage]
            peak = max(peak, held)
        elif a.op == free:
            held -= stage_bytes[a.stage]
    return peak


def bubble_overhead(p: int, m: int, v: int = 1) -> float:
    """The bubble as Megatron-LM (Narayanan et al., SC 2021, §2.2.1) and the Ultra-Scale Playbook
    write it: idle time over ideal compute time, (p−1)/(v·m). `theory_bubble` is the same idle
    time over the whole step: with x this ratio, x/(1+x) = (p−1)/(v·m+p−1) for GPipe / 1F1B and
    interleaved; the two agree only when v·m ≫ p."""
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"p={p}, m={m}, v={v}: each must be >= 1")
    return (p - 1) / (v * m)


def smallest_microbatches(p: int, target: float) -> int:
    """Fewest micro-batches m with (p−1)/(m+p−1) <= target: m = ⌈(p−1)(1/target − 1)⌉."""
    if not 0 < target < 1:
        raise ValueError(f"target={target}: a bubble fraction in (0, 1)")
    m = max(1, math.ceil((p - 1) * (1 / target - 1) - 1e-9))
    while theory_bubble("1f1b", p, m) > target:
        m += 1
    return m
