"""Notebook 13's exercises: each `check(answer)` says right or wrong, never the answer
(`parlab.exercises`). The expected values come from the chapter's own closed forms, so an
exercise can never disagree with the model it teaches.
"""

from __future__ import annotations

from parlab.core.cost import ring_all_reduce
from parlab.exercises import Exercise, find, numeric
from parlab.planner import costmodel
from parlab.planner.placement.op_costs import memory_of, peak_memory
from parlab.planner.placement.tasks import PlacementPlan, Task
from parlab.planner.plan import Plan
from parlab.planner.scaling import extrapolate


def _config():
    from parlab.models import model_config
    return model_config("gpt", None)


def _tp_bytes() -> int:
    """Bytes one GPU of dp8·tp8 sends over tp per step: 48 blocks, T = 2048, C = 8192, a global
    batch of 64 sequences, bf16 activations."""
    act = 64 // 8 * 2048 * 8192  # (B/dp, T, C)
    return 4 * 48 * ring_all_reduce(act, 8, 0)[0] * 2


def _zero3_states() -> int:
    s = costmodel.state_memory(_config(), Plan(dp=4, zero=3), 0)
    return s["params"] + s["grads"] + s["optimizer"]


def _min_model_parallel() -> int:
    shape = extrapolate.MEGATRON[3][0]  # 18.4B
    need = 16 * shape.params / 80e9  # mixed-precision Adam states over 80 GB
    k = 1
    while k < need:
        k *= 2
    return k


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


EXERCISES = [
    Exercise("bubble", "A 1F1B pipeline of 4 stages runs 4 micro-batches with equal stages. What "
             "fraction of each rank's step is bubble?", numeric(3 / 7, rtol=0.01),
             "Slots per step: m + p − 1; busy slots: m.",
             "(p−1)/(m+p−1) = 3/7 ≈ 0.43 of the step. Narayanan et al. (SC 2021, §2.2.1) state "
             "the same bubble relative to the ideal compute time instead: (p−1)/m = 3/4."),
    Exercise("tp-bytes", "Plan dp8·tp8 of a GPT with 48 blocks (T = 2,048, C = 8,192), global batch "
             "64 sequences, bf16 activations: bytes one GPU sends over tp per step?",
             numeric(_tp_bytes(), rtol=0.001),
             "Four ring all-reduces per block of the (B/dp, T, C) activations; a ring on N ranks "
             "sends 2(N−1)/N of each all-reduce's buffer.",
             "blocks · 4 all-reduces · 2·(N−1)/N · (B/dp)·T·C · 2 B."),
    Exercise("zero3-memory", "Plan dp4 with ZeRO-3: bytes of parameters + gradients + AdamW "
             "moments per rank (fp32, each unit padded to a multiple of 4)?",
             numeric(_zero3_states(), rtol=0.001),
             "ZeRO-3 divides all 16Ψ bytes by N; pad every block and the root unit first.",
             "16 · Σ round_up(unit, 4)/4 bytes = 215,296 for Ψ = 53,824 (`costmodel.state_memory`)."),
    Exercise("exposed", "A step computes 40 ms and then waits 10 ms on blocking all-reduces, "
             "nothing overlapped. MAD-Max's exposed-communication fraction?",
             numeric(0.2, rtol=0.01), "Exposed communication ÷ step time.",
             "10 / (40 + 10) = 0.2."),
    Exercise("model-parallel", "An 18.4B GPT keeps 16 bytes of mixed-precision Adam state per "
             "parameter. Smallest power-of-two tp × pp whose slice of that state fits in 80 GB "
             "(activations aside)?", numeric(_min_model_parallel(), rtol=0.0, atol=0.0),
             "16Ψ / (tp·pp) ≤ 80 GB.",
             "16 · 18.4e9 / 80e9 ≈ 3.7 → 4; Megatron ran it at tp8 (Table 1) for speed, not fit."),
    Exercise("held-memory", "One rank holds ops a and b (1 MB of weights each) and runs "
             + " ".join(HELD_ORDER) + ". A forward of a holds 3 MB until its backward ends, one of "
             "b 2 MB. Peak memory of the rank in MB, as the planner's memory constraint counts it?",
             numeric(_held_peak_mb(), rtol=0.001),
             "Weights all step; add an op's activations when its F starts, free them when its B "
             "ends; the peak is at some F.",
             "2 MB of weights + after F:a.1 three forwards are held: 3 + 2 + 3 = 8 → 10 MB."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
