"""Notebook 07's exercises (`parlab.exercises`): expert capacity and the all-to-all's bytes
(GShard, Lepikhin et al. 2020), all-gather against all-to-all, memory per rank, and which balancing
leaves the loss untouched (DeepSeek-V3, 2024); each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric, one_of
from parlab.expert_parallel import cost
from parlab.models import model_config


def _default():
    return model_config("gpt-moe")


EXERCISES = [
    Exercise("capacity", "Expert capacity for one step of the default gpt-moe (12 × 32 tokens, "
             "top_k=2, E=4, capacity_factor=1.25)?",
             numeric(240, rtol=0, atol=0.5), "C = ⌈cf · N · k / E⌉ with N the global tokens.",
             "⌈1.25 · 384 · 2 / 4⌉ = 240"),
    Exercise("balanced-dispatch", "Bytes one rank sends in one dispatch (forward, one layer) at "
             "ep=2, 192 tokens per rank, k=2, C=32, fp32, routing perfectly balanced, no drops?",
             numeric(24576, rtol=0, atol=0.5), "Of its N_r·k rows, (ep-1)/ep leave the rank.",
             "(2-1)/2 · 192 · 2 · 32 · 4 = 24,576"),
    Exercise("gather-ratio", "At ep=8 and top_k=1, how many times the balanced all-to-all's "
             "forward bytes does the all-gather method send (ignore the gate and id columns)?",
             numeric(8, rtol=0.01), "All-gather + reduce-scatter: 2(ep-1)·N_r·C; all-to-all: "
             "2(ep-1)/ep·N_r·k·C.", "ratio = ep / k = 8"),
    Exercise("memory", "Bytes of weights, gradients and AdamW moments one rank holds for the "
             "default gpt-moe at ep=4?",
             numeric(sum(cost.memory_per_rank(_default(), 4).values()), rtol=0.001),
             "16 bytes per parameter held: every dense one, a quarter of the experts.",
             "16·(Ψ_dense + Ψ_experts/4) — `cost.memory_per_rank`"),
    Exercise("bias", "Which balancing leaves the gradient of the language-model loss untouched: "
             "'aux' or 'bias'?", one_of("bias", "bias balancing", "aux-loss-free"),
             "One of them adds a term to the loss; the other only changes which experts are chosen.",
             "bias (DeepSeek-V3): the bias enters the top-k choice, not the gates or the loss"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
