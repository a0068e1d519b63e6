"""Notebook 07's exercises (`parlab.exercises`), at GPU scale so that the chapter's formulas, not
its printed numbers, answer them: expert capacity (GShard, Lepikhin et al. 2021; Switch, Fedus et
al. 2022), all-gather against all-to-all with gates and ids (predicted, then measured by
`explore.predict.gather_ratio`), the smallest ep whose memory fits a GPU, the node limit M an
InfiniBand budget allows, up to how many tokens expert parallelism sends fewer bytes than
replicated experts (design), and DeepSeek-V3's (2024) bias rule; each check says right or wrong,
never the answer.
"""

from __future__ import annotations

import math

from parlab.exercises import Exercise, find, numeric


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    ep, C, k = PREDICT["ep"], PREDICT["n_embd"], PREDICT["top_k"]
    fits = [e for e in (1, 2, 4, 8, 16, 32, 64) if 16 * (2e9 + 64 * 5e8 / e) <= 60e9]
    ib_rows = 4096 * 7168 * 2 / 50e9  # seconds one remote node's copy of every token costs
    return {"capacity": math.ceil(1.25 * 512 * 2048 * 1 / 128),
            "gather-ratio": ep * (2 * C + 3 * k) / (2 * k * C),
            "ep-memory-fit": min(fits),
            "node-limit": math.floor(5e-3 / ib_rows),
            "ep-or-replicate": 64 * 4 * 4096 / 2,
            "bias": 0.03 / (2 * 0.001)}


# the predict-then-run exercise's setting: `explore.predict.gather_ratio` runs it
PREDICT = {"ep": 4, "n_embd": 48, "top_k": 1}


_A = answers()

EXERCISES = [
    Exercise("capacity", "A Switch-style layer (k = 1): global batch 512 sequences × 2,048 tokens, "
             "E = 128 experts, capacity factor 1.25. How many assignments may one expert take "
             "per step?", numeric(_A["capacity"], rtol=0, atol=0.5),
             "cap = ⌈cf · N · k / E⌉ with N the global tokens.",
             "⌈1.25 · 1,048,576 · 1 / 128⌉"),
    Exercise("gather-ratio", "Predict, then run: gpt-moe of width C = 48, k = 1, even routing "
             "(every expert the same number of tokens), no capacity, on ep = 4 ranks. This "
             "chapter's all-gather method (fp32 tokens and gates, int64 expert ids, fp32 outputs "
             "reduce-scattered) against the all-to-all (dispatch + combine, fp32): how many times "
             "the bytes does rank 0 send with the all-gather in the forward pass (the counts' "
             "all-gather left out)? The next cell runs both and prints the ledger's ratio.",
             numeric(_A["gather-ratio"], rtol=0.01),
             "Write both per rank in units of (ep−1)·N_r·4 bytes; an int64 id is two fp32 columns.",
             "4(ep−1)N_r(2C+3k) over 8(ep−1)/ep·N_r·k·C = ep(2C+3k)/(2kC)", kind="predict"),
    Exercise("ep-memory-fit", "Design: an MoE with 2·10⁹ dense parameters and 64 experts of 5·10⁸ "
             "parameters each, trained with AdamW (16 bytes per parameter held: weights, "
             "gradients, two moments, fp32) on 80 GB H100s, 20 GB of each kept for activations. "
             "The smallest ep (a power of two dividing 64) whose parameters and optimizer state "
             "fit one GPU?", numeric(_A["ep-memory-fit"], rtol=0, atol=0.5),
             "Every dense parameter on every rank, 1/ep of the experts; solve for ep, then round "
             "up to a power of two.",
             "16 · (Ψ_dense + Ψ_experts / ep) ≤ 60 GB ⇔ ep ≥ 512/28 ≈ 18.3 → the next power of two",
             kind="design"),
    Exercise("node-limit", "Design: DeepSeek-V3-like routing over 8 nodes of 8 GPUs, each GPU 4,096 "
             "tokens per MoE layer, width C = 7,168 in bf16, InfiniBand 50 GB/s per GPU. With "
             "node-limited routing a token is sent at most once to each of its M nodes (then "
             "forwarded over NVLink). Budget: 5 ms of InfiniBand time per GPU for one layer's "
             "dispatch, even if all M nodes are remote. The largest M?",
             numeric(_A["node-limit"], rtol=0, atol=0.5),
             "Worst case: every token copied to M remote nodes, each copy C·2 bytes over IB.",
             "N_r·M·C·2 B ÷ 50 GB/s ≤ 5 ms ⇔ M ≤ 5 ms · 50 GB/s ÷ (4,096·7,168·2 B) ≈ 4.3",
             kind="design"),
    Exercise("ep-or-replicate", "Design: one MoE layer of E = 64 experts, each a 4C-wide MLP "
             "(2·C·4C parameters) with C = 4,096, k = 2, on 64 GPUs, bf16 gradients and rows. "
             "Either ep = 64 (one expert per GPU; dispatch, combine and their two backward "
             "exchanges, balanced) or every GPU holds all 64 experts and ring-all-reduces their "
             "gradients once per step. Up to how many tokens per GPU per step does expert "
             "parallelism send fewer bytes per GPU for this layer?",
             numeric(_A["ep-or-replicate"], rtol=0.01),
             "Ring all-reduce: 2(W−1)/W of the gradient bytes per rank; EP: four exchanges of "
             "(ep−1)/ep of N_r·k rows. Set them equal; most factors cancel.",
             "2·(63/64)·E·8C²·2 B = 4·(63/64)·N_r·k·C·2 B ⇔ N_r = E·4C/k", kind="design"),
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
