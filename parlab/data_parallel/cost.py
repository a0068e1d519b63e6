"""Closed forms for chapter 01: bytes and messages per rank per step of every DP variant, and a
step-time prediction that schedules those messages on an α-β link beside the compute.

Bytes. A ring all-reduce of S elements sends 2(N-1)/N·S per rank (Patarasuk & Yuan, JPDC 2009;
exact per chunk in `parlab.core.cost.ring_all_reduce`); a reduce-scatter or all-gather half of that.
Every variant moves the same gradient, so every variant sends ≈ 2(N-1)/N·Ψ·4 bytes per step; they
differ in how many messages carry it (one per tensor, per bucket, per partition) and when.

Time. Each message costs k·α + b/β on a FIFO link (Hockney 1994; k rounds, b bytes on the busiest
direction), exactly what `parlab.core.link` emulates. `predict_step_time` lays the messages of one
variant on that link as its code issues them — after backward (naive, bucketed), from the
backward hooks (WFBP, Poseidon, ATC 2017), partition by partition in priority order (P3, SysML
2019; ByteScheduler, SOSP 2019), or reduce-scatter in backward and all-gather before the next
forward (DeAR, ICDCS 2023) — with backward and forward time spread over parameters in proportion
to their size, and reports the steady-state step time and the exposed communication.
"""

from __future__ import annotations

import heapq
import math

from parlab.core import cost
from parlab.core.messages import Message, bytes_by
from parlab.data_parallel.bucket_packing import padded, plan_buckets
from parlab.data_parallel.priority import partition
from parlab.engine.prediction import Prediction, param_numels

VARIANTS = ("ddp-naive", "ddp-bucketed", "ddp-overlap", "ddp-priority", "dear")
# gloo on loopback on this machine (docs/measurements.md: ~0.1 ms per ring round, ~1 GB/s bus bandwidth)
LOOPBACK_ALPHA, LOOPBACK_BETA = 1e-4, 1e9


def bucket_numels(numels: list[int], bucket_mb: float, multiple_of: int = 1,
                  element_size: int = 4) -> list[int]:
    """Elements in each bucket's flat buffer, in communication order (padding included); buckets
    are cut by bytes, so 16-bit gradients fit twice as many elements in one."""
    return [padded(sum(numels[i] for i in b), multiple_of)
            for b in plan_buckets(numels, bucket_mb, element_size)]


def scheme_options(variant: str, **options) -> dict:
    """The variant's registered option defaults, overridden by `options` (unknown keys dropped)."""
    from parlab.engine.registry import schemes

    defaults = dict(schemes()[variant].options)
    return {k: options.get(k, v) for k, v in defaults.items()}


# (op, elements) of every collective one step issues, in issue order on rank 0's ledger: one
# closed form per sync strategy; each scheme registers its own (`register(..., cost=...)`).
def naive_messages(numels: list[int], n: int, options: dict) -> list[tuple[str, int]]:
    return [("all_reduce", s) for s in numels]


def bucketed_messages(numels: list[int], n: int, options: dict) -> list[tuple[str, int]]:
    return [("all_reduce", s) for s in bucket_numels(numels, options["bucket_mb"],
                                                     element_size=options.get("element_size", 4))]


def priority_messages(numels: list[int], n: int, options: dict) -> list[tuple[str, int]]:
    per_part = max(1, int(options["partition_kb"] * 1024) // options.get("element_size", 4))
    return [("all_reduce", hi - lo) for s in bucket_numels(numels, options["bucket_mb"],
                                                           element_size=options.get("element_size", 4))
            for lo, hi in partition(s, per_part)]


def dear_messages(numels: list[int], n: int, options: dict) -> list[tuple[str, int]]:
    sizes = bucket_numels(numels, options["bucket_mb"], multiple_of=n,
                          element_size=options.get("element_size", 4))
    return [("reduce_scatter", s) for s in sizes] + [("all_gather", s // n) for s in sizes]


def flat_messages(numels: list[int], n: int, options: dict) -> list[tuple[str, int]]:
    return [("all_reduce", sum(numels))]  # one flat bucket (parlab.data_parallel.flat_all_reduce)


# the closed form of each reducer `parlab.data_parallel.apply.apply_dp` can attach (its `sync=`)
# (DeAR's all-gathers carry the shard, S/N, as everywhere in this chapter)
REDUCER_MESSAGES = {"flat": flat_messages, "naive": naive_messages, "bucketed": bucketed_messages,
                    "overlap": bucketed_messages, "dear": dear_messages,
                    "priority": priority_messages}
# when each of them issues its messages (`DataParallelCost.ISSUES`): overlap's from backward's
# hooks, DeAR's reduce-scatters from them and its all-gathers before each bucket's next forward
REDUCER_ISSUE = {"flat": "after-backward", "naive": "after-backward", "bucketed": "after-backward",
                 "overlap": "hooks", "dear": "reduce-scatter", "priority": "priority"}


class DataParallelCost:
    """A data-parallel scheme's closed form (`register(..., cost=)`): its messages, ring-counted,
    every step, and when its code issues them — what `predict_step_time` schedules on the link.

    issue: "after-backward" (naive, bucketed), "hooks" (WFBP: each bucket as backward produces
    it), "priority" (P3: partitions by credit, the rest before the next forward, front layers
    first), "reduce-scatter" (DeAR: reduce-scatter in backward, all-gather before each group's
    next forward); per_tensor: one message per gradient tensor instead of per bucket."""

    ISSUES = ("after-backward", "hooks", "priority", "reduce-scatter")

    def __init__(self, messages, issue: str = "after-backward", per_tensor: bool = False):
        if issue not in self.ISSUES:
            raise ValueError(f"issue={issue!r} must be one of {self.ISSUES}")
        self.messages, self.issue, self.per_tensor = messages, issue, per_tensor

    @property
    def deferred(self) -> bool:
        """Whether a group's communication may finish as late as its next forward."""
        return self.issue in ("priority", "reduce-scatter")

    def __call__(self, cfg) -> Prediction:
        numels, n = param_numels(cfg), cfg.world_size
        precision = getattr(cfg, "precision", "fp32")  # 16-bit gradients: half the bytes
        reduce = "fp32" if cfg.options.get("reduce_dtype") == "fp32" else precision
        per_rank = [sum(bytes_per_step(self.messages, numels, n, rank,
                                       cost.element_bytes(reduce), **cfg.options).values())
                    + cost.overflow_check_bytes(precision, n, rank) for rank in range(n)]
        return Prediction([cfg.steps * b for b in per_rank],
                          f"parlab.data_parallel.cost.{self.messages.__name__}, ring counts")

    def step_bytes(self, shapes, n: int, sender: int = 0, step: int = 0, steps: int = 1,
                   **options) -> dict[str, int]:
        """{op: bytes rank `sender` sends in a step} for float32 gradients of `shapes` (every step
        alike; `options`: the scheme's), the per-step form other chapters compare against."""
        return bytes_per_step(self.messages, [math.prod(s) for s in shapes], n, sender, **options)


NAIVE = DataParallelCost(naive_messages, per_tensor=True)
BUCKETED = DataParallelCost(bucketed_messages)
OVERLAP = DataParallelCost(bucketed_messages, issue="hooks")
PRIORITY = DataParallelCost(priority_messages, issue="priority")
DEAR = DataParallelCost(dear_messages, issue="reduce-scatter")


def registered(variant: str) -> DataParallelCost:
    """The data-parallel closed form `variant` registered (`register(..., cost=)`)."""
    from parlab.engine.registry import schemes

    info = schemes().get(variant)
    if info is None or not isinstance(info.cost, DataParallelCost):
        raise ValueError(f"variant={variant!r} must be one of {VARIANTS}")
    return info.cost


def messages(variant: str, numels: list[int], n: int, **options) -> list[tuple[str, int]]:
    """(op, elements) of every collective one step of `variant` issues (its registered closed
    form). `options`: the run's scheme options; missing ones take the registered defaults."""
    return registered(variant).messages(numels, n, {**scheme_options(variant, **options),
                                                   "element_size": options.get("element_size", 4)})


def dp_messages(variant, numels: list[int], n: int, element_size: int = 4, dim: str = "dp",
                phase: str = "dp-grad-sync", **options) -> list[Message]:
    """The reducer's collectives in one step as `Message`s (Li et al., PyTorch DDP, VLDB 2020,
    §3.2; DeAR's all-gather as its full tensor). `variant`: a scheme name or a messages closed
    form (`REDUCER_MESSAGES`); `options`: the scheme's (buckets are cut by bytes)."""
    options = {**options, "element_size": element_size}
    issued = (messages(variant, numels, n, **options) if isinstance(variant, str)
              else variant(numels, n, options))
    return [Message(dim, op, n, size * (n if op == "all_gather" else 1),
                    element_bytes=element_size, phase=phase) for op, size in issued]


def bytes_per_step(variant, numels: list[int], n: int, rank: int = 0, element_size: int = 4,
                   **options) -> dict[str, int]:
    """{op: bytes sent by `rank` in one step} — what the ledger must show: `dp_messages` summed.
    `variant`: a scheme name or a messages closed form."""
    return bytes_by(dp_messages(variant, numels, n, element_size, **options), "op", rank=rank)


def message_time(op: str, elements: int, n: int, alpha: float, beta: float,
                 floor: tuple[float, float] | None = None) -> float:
    """k·α + b/β of one collective on rank 0 (the link emulation's own formula).

    `floor`: (α, β) of the real transport underneath (gloo on this machine,
    `parlab.data_parallel.bench.measure_alpha_beta`);
    an emulated link can only slow a message down, so the message takes the larger of the two.
    """
    if n == 1:
        return 0.0
    if floor is not None:
        return max(message_time(op, elements, n, alpha, beta),
                   message_time(op, elements, n, *floor))
    msg = Message("dp", op, n, elements * (n if op == "all_gather" else 1))  # a shard gathered
    return msg.rounds() * alpha + max(msg.sent(0), msg.received(0)) / beta


def predict_step_time(variant: str, numels: list[int], n: int, t_forward: float,
                      t_backward: float, t_optimizer: float, alpha: float = LOOPBACK_ALPHA,
                      beta: float = LOOPBACK_BETA, floor: tuple[float, float] | None = None,
                      iterations: int = 4, overhead_s: float = 0.0, **options) -> dict:
    """Steady-state seconds per step and exposed communication of `variant` (list scheduling).

    Compute is spread over parameters in proportion to their size; parameter 0 is the first
    layer. `options`: the scheme's (bucket_mb, partition_kb, credit; defaults as registered).
    `overhead_s`: software time per message that the link model does not count (measured on this
    machine by `parlab.data_parallel.explore.per_message_overhead`; 0 for the pure α-β model).
    Returns {"step_s", "comm_s" (link busy time per step), "exposed_s" (step_s - compute)}.
    """
    form = registered(variant)
    options = scheme_options(variant, **options)
    bucket_mb = options.get("bucket_mb", 0.0)
    partition_kb, credit = options.get("partition_kb", 8), options.get("credit", 1)
    psi = sum(numels)
    plan = ([[i] for i in reversed(range(len(numels)))] if form.per_tensor
            else plan_buckets(numels, bucket_mb))  # groups in backward (issue) order
    frac = [sum(numels[i] for i in g) / psi for g in plan]
    deferred = form.deferred
    forward_order = sorted(range(len(plan)), key=lambda g: min(plan[g]))
    link_free, t, done = 0.0, 0.0, [0.0] * len(plan)
    starts, busy = [], 0.0

    def send(op, elements, ready):
        nonlocal link_free, busy
        duration = message_time(op, elements, n, alpha, beta, floor) + (overhead_s if n > 1 else 0.0)
        link_free = max(link_free, ready) + duration
        busy += duration
        return link_free

    for _ in range(iterations):
        starts.append(t)
        busy = 0.0
        if deferred:  # each group waits for its own communication, then updates, then computes
            for g in forward_order:
                t = max(t, done[g]) + t_optimizer * frac[g] + t_forward * frac[g]
        else:
            t = max([t] + done) + t_optimizer + t_forward
        ready = []
        for g in range(len(plan)):  # backward produces the groups in plan order
            t += t_backward * frac[g]
            ready.append(t)
        sizes = [sum(numels[i] for i in group) for group in plan]
        if form.issue == "after-backward":
            end = t
            for g in range(len(plan)):
                end = send("all_reduce", sizes[g], end)
            done = [end] * len(plan)
        elif form.issue == "hooks":
            ends = [send("all_reduce", sizes[g], ready[g]) for g in range(len(plan))]
            done = [max(ends)] * len(plan)  # the optimizer waits for every bucket
        elif form.issue == "reduce-scatter":
            scattered = [send("reduce_scatter", padded(sizes[g], n), ready[g])
                         for g in range(len(plan))]
            t = max([t] + scattered)  # after_backward waits for every reduce-scatter
            for g in forward_order:
                done[g] = send("all_gather", padded(sizes[g], n) // n, t)
        else:  # "priority": `credit` partitions released per ready group, then the rest
            queue: list = []
            max_elements = max(1, int(partition_kb * 1024) // 4)
            done = [0.0] * len(plan)
            for g in range(len(plan)):
                for lo, hi in partition(sizes[g], max_elements):
                    heapq.heappush(queue, (min(plan[g]), lo, g, hi - lo))
                for _ in range(min(credit, len(queue))):
                    _, _, h, size = heapq.heappop(queue)
                    done[h] = max(done[h], send("all_reduce", size, ready[g]))
            while queue:
                _, _, h, size = heapq.heappop(queue)
                done[h] = max(done[h], send("all_reduce", size, t))
    step = starts[-1] - starts[-2]
    compute = t_forward + t_backward + t_optimizer
    return {"step_s": step, "comm_s": busy, "exposed_s": max(step - compute, 0.0)}
