"""Notebook 13's exercises: each `check(answer)` says right or wrong, never the answer
(`parlab.exercises`). The expected values come from the chapter's own closed forms, so an
exercise can never disagree with the model it teaches.
"""

from __future__ import annotations

from parlab.core.cost import ring_all_reduce
from parlab.exercises import Exercise, find, numeric
from parlab.planner import costmodel, extrapolate
from parlab.planner.plan import Plan


def _config():
    from parlab.models import model_config
    return model_config("gpt", None)


def _tp_bytes() -> int:
    """Bytes one rank of dp2·tp2 sends over tp per step (tiny GPT, batch 12)."""
    m = _config()
    act = 12 // 2 * m.block_size * m.n_embd  # (B/dp, T, C)
    return 4 * m.n_layer * ring_all_reduce(act, 2, 0)[0] * 4


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


EXERCISES = [
    Exercise("bubble", "A 1F1B pipeline of 4 stages runs 4 micro-batches with equal stages. What "
             "fraction of each rank's step is bubble?", numeric(3 / 7, rtol=0.01),
             "Slots per step: m + p − 1; busy slots: m.",
             "(p−1)/(m+p−1) = 3/7 ≈ 0.43 (Narayanan et al. 2021 §2.2.1)."),
    Exercise("tp-bytes", "Plan dp2·tp2, the tiny GPT (4 blocks, T=32, C=32), global batch 12: "
             "bytes one rank sends over tp per step?", numeric(_tp_bytes(), rtol=0.001),
             "Four ring all-reduces per block of the (B/dp, T, C) activations; a ring on 2 ranks "
             "sends half of each all-reduce's buffer twice.",
             "4 blocks · 4 all-reduces · 2·(1/2)·6·32·32 floats · 4 B = 393,216 bytes."),
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
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
