"""Notebook 10's exercises (`parlab.exercises`): memory and bytes of subnetwork data parallelism
and why its gradient is unbiased (Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With
Subnetwork Data Parallelism", 2025); each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric, one_of
from parlab.subnet import cost as subnet_cost
from parlab.subnet.explore import ownership


def _gpt_ownership(n: int, k: int, granularity: str):
    return ownership(n, k, granularity)


EXERCISES = [
    Exercise("forward-memory",
             "Forward masking, block level, the default GPT (Ψ = 53,824: 4 blocks of 12,416 and "
             "4,160 shared), N = 4, k = 1. How many bytes of model states (parameters, gradients, "
             "Adam state; fp32) does one rank hold?",
             numeric(16 * (4160 + 12416), rtol=0, atol=0.5),
             "Each rank owns 4·1/4 = 1 block plus the shared parameters; 16 bytes per owned parameter.",
             "16 · (4,160 + 12,416) = 265,216 B, 31% of DDP's 16Ψ = 861,184 B."),
    Exercise("backward-memory",
             "The same with backward masking (N = 4, k = 1, block level): bytes of model states "
             "per rank?",
             numeric(4 * 53824 + 12 * (4160 + 12416), rtol=0, atol=0.5),
             "The forward needs every parameter (4Ψ); gradients and Adam state exist for owned ones.",
             "4 · 53,824 + 12 · 16,576 = 414,208 B."),
    Exercise("owner-bytes",
             "Forward masking, block level, default GPT, N = 4, k = 2: how many bytes does one rank "
             "send per step? (Ring all-reduce inside each owner set; the shared 4,160 among all 4.)",
             numeric(subnet_cost.step_bytes(_gpt_ownership(4, 2, "block"), "forward", 0)[
                 "grad-sync"], rtol=0, atol=0.5),
             "Rank 0 owns 2 blocks, both with the same owner pair: one all-reduce of 2·12,416 "
             "elements among 2 ranks sends half of them; the shared unit is a 4-rank all-reduce.",
             "(2·(2-1)/2 · 24,832 + 2·(4-1)/4 · 4,160) · 4 = 99,328 + 24,960 = 124,288 B."),
    Exercise("one-owner",
             "With k = 1 and forward masking, which parameters' gradients cross the network at all? "
             "Answer 'shared', 'blocks' or 'all'.",
             one_of("shared"),
             "A unit with one owner has nothing to average.",
             "Only the shared parameters (embeddings, final norm): every block has a single owner."),
    Exercise("unbiased",
             "Which masking gives each parameter an unbiased estimate of the full model's gradient? "
             "Answer 'forward' or 'backward'.",
             one_of("backward"),
             "Is the gradient taken through the model everyone evaluates, or through a subnetwork?",
             "Backward masking: the full forward, so an owner's gradient is the full model's gradient "
             "on its rows — an unbiased estimate from fewer rows. Forward masking differentiates a "
             "different (smaller) function."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
