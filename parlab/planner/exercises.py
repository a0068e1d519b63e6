"""Notebook 13's exercises: each `check(answer)` says right or wrong, never the answer
(`parlab.exercises`): the bubble (Narayanan et al., SC 2021), tp bytes and a rank's held memory,
two design problems at GPU scale (bubble plus exposed communication as lost MFU; the smallest tp
that makes a plan compute-bound by the scaling-book's bounds) and one predict-then-run (tp bytes,
measured by the next cell). The expected values come from the chapter's own closed forms, so an
exercise can never disagree with the model it teaches.
"""

from __future__ import annotations

from parlab.core.cost import ring_all_reduce
from parlab.exercises import Exercise, find, numeric
from parlab.planner import thresholds
from parlab.planner.placement.op_costs import memory_of, peak_memory
from parlab.planner.placement.tasks import PlacementPlan, Task
from parlab.planner.plan import Plan


def _config():
    from parlab.models import model_config
    return model_config("gpt", None)


def _tp_bytes() -> int:
    """Bytes one GPU of dp8·tp8 sends over tp per step: 48 blocks, T = 2048, C = 8192, a global
    batch of 64 sequences, bf16 activations."""
    act = 64 // 8 * 2048 * 8192  # (B/dp, T, C)
    return 4 * 48 * ring_all_reduce(act, 8, 0)[0] * 2


HELD_ORDER = ("F:a.0", "F:b.0", "F:a.1", "B:b.0", "B:a.0", "F:b.1", "B:b.1", "B:a.1")


def _task(text: str) -> Task:
    kind, rest = text.split(":")
    op, mb = rest.split(".")
    return Task(kind, op, int(mb))


def _held_peak_mb() -> float:
    """The peak of one rank running HELD_ORDER (`placement.op_costs.peak_memory`, the planner's own count)."""
    order = tuple(_task(t) for t in HELD_ORDER)
    plan = PlacementPlan("exercise", 1, (("a", 0), ("b", 0)), (order,))
    return max(peak_memory(plan, memory_of({"a": 1, "b": 1}, {"a": 3, "b": 2})))


def _mfu() -> float:
    """MFU of a 1F1B step: kernels at 55% MFU, bubble (p−1)/(m+p−1) idle, exposed tp communication
    12% on top of the compute: 0.55 · m/(m+p−1) / 1.12."""
    p, m = 8, 24
    return 0.55 * m / (m + p - 1) / 1.12


def _smallest_tp() -> int:
    """gpt2-xl on 64 H100s (nodes of 8), 128 sequences of 1,024 tokens: the smallest power-of-two
    tp inside a node for which DP over NDR InfiniBand and TP over NVLink 4 are both compute-bound
    by the scaling-book's bounds (`parlab.planner.thresholds`)."""
    from parlab.core.link import ACCELERATORS, REAL
    f = ACCELERATORS["H100"].flops
    dp_min = thresholds.dp_min_tokens_per_device(f, REAL["NDR-IB"][1])
    tp_max = thresholds.tp_max_degree(1600, 6400, f, REAL["NVLink4"][1])
    for tp in (1, 2, 4, 8):
        if 128 * 1024 / (64 // tp) > dp_min and tp <= tp_max:
            return tp
    raise ValueError("no plan of the exercise is compute-bound")


def _tp2_bytes() -> int:
    """Bytes rank 0 of plan tp2 sends over tp in one step (`cost.nd_closed_form_bytes`)."""
    from parlab.engine.runner import make_config
    from parlab.planner.cost import nd_closed_form_bytes

    table = nd_closed_form_bytes(Plan(tp=2), make_config("nd", world_size=2, tp=2, steps=1), steps=1)
    return table["tp-forward"][0] + table["tp-backward"][0]


EXERCISES = [
    Exercise("bubble", "A 1F1B pipeline of 8 stages runs 8 micro-batches with equal stages. What "
             "fraction of each rank's step is bubble?", numeric(7 / 15, rtol=0.01),
             "Slots per step: m + p − 1; busy slots: m.",
             "(p−1)/(m+p−1) = 7/15 ≈ 0.47 of the step. Narayanan et al. (SC 2021, §2.2.1) state "
             "the same bubble relative to the ideal compute time instead: (p−1)/m = 7/8."),
    Exercise("tp-bytes", "Plan dp8·tp8 of a GPT with 48 blocks (T = 2,048, C = 8,192), global batch "
             "64 sequences, bf16 activations: bytes one GPU sends over tp per step?",
             numeric(_tp_bytes(), rtol=0.001),
             "Four ring all-reduces per block of the (B/dp, T, C) activations; a ring on N ranks "
             "sends 2(N−1)/N of each all-reduce's buffer.",
             "blocks · 4 all-reduces · 2·(N−1)/N · (B/dp)·T·C · 2 B."),
    Exercise("held-memory", "One rank holds ops a and b (1 MB of weights each) and runs "
             + " ".join(HELD_ORDER) + ". A forward of a holds 3 MB until its backward ends, one of "
             "b 2 MB. Peak memory of the rank in MB, as the planner's memory constraint counts it?",
             numeric(_held_peak_mb(), rtol=0.001),
             "Weights all step; add an op's activations when its F starts, free them when its B "
             "ends; the peak is at some F.",
             "2 MB of weights + after F:a.1 three forwards are held: 3 + 2 + 3 = 8 → 10 MB."),
    Exercise("lost-mfu", "Design check: a 1F1B plan with pp = 8 stages and m = 24 micro-batches; "
             "inside its kernels the model reaches 55% MFU, and the blocking tensor-parallel "
             "all-reduces add exposed communication equal to 12% of the compute time. What MFU "
             "does the whole step reach (a fraction)?", numeric(_mfu(), rtol=0.01),
             "Two losses multiply: the bubble leaves m of m + p − 1 slots busy, and exposed "
             "communication stretches each busy slot by 1.12.",
             "0.55 · 24/31 / 1.12 ≈ 0.38: raise m (or interleave) before buying a faster link.",
             kind="design"),
    Exercise("smallest-tp", "Design a plan: GPT-2 XL (d = 1,600, d_ff = 6,400) on 64 H100s in nodes "
             "of 8 — NVLink 4 (450 GB/s per direction) inside, NDR InfiniBand (50 GB/s per GPU) "
             "between, 400 TFLOP/s sustained, bf16 — with a global batch of 128 sequences of 1,024 "
             "tokens. tp stays inside a node and dp = 64/tp replicas cross InfiniBand. By the "
             "scaling-book's bounds (this chapter's thresholds section), what is the smallest "
             "tensor-parallel degree (a power of two) that makes both DP and TP compute-bound?",
             numeric(_smallest_tp(), rtol=0, atol=0),
             "DP: tokens per replica > (b/2)·F/β on InfiniBand; TP: tp < (2d + d_ff)·β/(b·F) on "
             "NVLink. Each doubling of tp doubles a replica's tokens.",
             "F/β_IB = 8,000 tokens per replica; tp = 2 gives 4,096 (not enough), tp = 4 gives "
             "8,192; TP's bound on NVLink 4 is (3,200 + 6,400)·450e9/(2·400e12) ≈ 5.4 ≥ 4.",
             kind="design"),
    Exercise("tp2-bytes", "Predict, then run the next cell: plan tp2 (2 ranks, Megatron's tensor "
             "parallelism) of the chapter's default GPT — B = 12 sequences, T = 32 positions, "
             "C = 32, 4 blocks, fp32 activations. How many bytes does rank 0 send over tp in one "
             "step, forward and backward together?", numeric(_tp2_bytes(), rtol=0, atol=0),
             "Per block, two all-reduces of the (B, T, C) activations forward (attention's and the "
             "MLP's outputs) and two backward; a ring of N ranks sends 2(N−1)/N of the buffer.",
             "4 blocks · 4 all-reduces · 2·1/2 · 12·32·32 · 4 B.", kind="predict"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
