"""Notebook 07's exercises (`parlab.exercises`), at GPU scale so that the chapter's formulas, not
its printed numbers, answer them: expert capacity (GShard, Lepikhin et al. 2021; Switch, Fedus et
al. 2022), the all-to-all's bytes at DeepSeek-V3's scale, all-gather against all-to-all with gates
and ids, memory per rank, and DeepSeek-V3's (2024) bias rule; each check says right or wrong, never
the answer.
"""

from __future__ import annotations

import math

from parlab.exercises import Exercise, find, numeric


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    ep, C, k = 16, 4096, 2
    return {"capacity": math.ceil(1.25 * 512 * 2048 * 1 / 128),
            "balanced-dispatch": (64 - 1) / 64 * 4096 * 8 * 7168 * 2,
            "gather-ratio": ep * (2 * C + 3 * k) / (2 * k * C),
            "memory": 16 * (2e9 + 64 * 5e8 / 8),
            "bias": 0.03 / (2 * 0.001)}


_A = answers()

EXERCISES = [
    Exercise("capacity", "A Switch-style layer (k = 1): global batch 512 sequences × 2,048 tokens, "
             "E = 128 experts, capacity factor 1.25. How many assignments may one expert take "
             "per step?", numeric(_A["capacity"], rtol=0, atol=0.5),
             "cap = ⌈cf · N · k / E⌉ with N the global tokens.",
             "⌈1.25 · 1,048,576 · 1 / 128⌉"),
    Exercise("balanced-dispatch", "DeepSeek-V3's scale: ep = 64 ranks, 4,096 tokens per rank, "
             "k = 8, width C = 7,168, bf16 rows, routing perfectly balanced, nothing dropped. "
             "Bytes one rank sends in one MoE layer's dispatch?",
             numeric(_A["balanced-dispatch"], rtol=0.002),
             "Of its N_r·k rows, the (ep−1)/ep whose experts live elsewhere leave the rank.",
             "(ep−1)/ep · N_r · k · C · 2 B"),
    Exercise("gather-ratio", "ep = 16, k = 2, width C = 4,096, this chapter's all-gather method "
             "(fp32 tokens and gates, int64 expert ids, fp32 outputs reduce-scattered) against the "
             "balanced all-to-all (dispatch + combine, fp32): how many times the bytes does the "
             "all-gather send in the forward pass?", numeric(_A["gather-ratio"], rtol=0.002),
             "Write both per rank in units of (ep−1)·N_r·4 bytes; an int64 id is two fp32 columns.",
             "4(ep−1)N_r(2C+3k) over 8(ep−1)/ep·N_r·k·C = ep(2C+3k)/(2kC)"),
    Exercise("memory", "An MoE with 2·10⁹ dense parameters and 64 experts of 5·10⁸ parameters "
             "each, trained with AdamW (16 bytes per parameter held: weights, gradients, two "
             "moments, fp32), ep = 8: bytes one rank holds?", numeric(_A["memory"], rtol=0.01),
             "Every dense parameter on every rank, 1/ep of the experts.",
             "16 · (Ψ_dense + Ψ_experts / ep)"),
    Exercise("bias", "DeepSeek-V3 moves each expert's bias by γ per step: −γ while it is "
             "over-loaded, +γ while under-loaded; the bias only enters the top-k choice. For one "
             "token, expert A's score beats expert B's by 0.03; A is over-loaded and B under-loaded "
             "at every step, γ = 0.001. After how many steps are A and B tied for that token?",
             numeric(_A["bias"], rtol=0, atol=0.6),
             "Both biases move each step, in opposite directions.",
             "the gap closes by 2γ per step: 0.03 / (2γ)"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
