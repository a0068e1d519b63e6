"""Chapter 04's exercises (`parlab.exercises`), at GPU scale so that the chapter's formulas, not
its printed numbers, answer them: the bubble of GPipe / 1F1B (Huang et al., GPipe, NeurIPS 2019,
§2.3), of interleaved 1F1B (Narayanan et al., Megatron-LM, SC 2021, §2.2.2) and of ZB-H1 (Qi et
al., ICLR 2024, §3.1), the micro-batches a bubble target needs, 1F1B's activations in flight and
the bytes an interleaved rank sends. Every accepted answer is computed here from `cost`, the
closed forms the tests hold equal to the simulator and the ledger; each check says right or not
yet, never the answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric
from parlab.pipeline import cost
from parlab.pipeline.schedules import make_schedule

# 70B-class model: hidden C = 8192; one micro-batch of one 4,096-token sequence, bf16 activations
HIDDEN, TOKENS, BF16 = 8192, 4096, 2


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    return {
        "gpipe-bubble-gpu": cost.theory_bubble("gpipe", 16, 64),
        "microbatches-for-5pct": cost.smallest_microbatches(8, 0.05),
        "interleaved-bubble": cost.ideal_bubble(make_schedule("interleaved", 8, 32, 2),
                                                forward=1.0 / 2),
        "1f1b-memory-gpu": cost.in_flight_peak("1f1b", 12, 48, 3) * 3.2,
        "zb-bubble": cost.theory_bubble("zb", 8, 24),
        "p2p-bytes": cost.p2p_bytes_per_step(8, 2, 16, 0, TOKENS * HIDDEN, itemsize=BF16) / 1e9,
    }


_A = answers()

EXERCISES = [
    Exercise("gpipe-bubble-gpu",
             "GPipe on p = 16 stages (16 GPUs, one stage each) with m = 64 micro-batches, equal "
             "stages. What fraction of the step is bubble? (A fraction, e.g. 0.25.)",
             numeric(_A["gpipe-bubble-gpu"], rtol=0.01),
             "Every stage idles (p−1) slots of forward+backward out of (m+p−1).",
             "(p−1)/(m+p−1), with this chapter's step fraction (not Megatron's (p−1)/m)."),
    Exercise("microbatches-for-5pct",
             "1F1B on p = 8 stages: what is the smallest number of micro-batches m that brings the "
             "bubble (as a fraction of the step) to 5% or less?",
             numeric(_A["microbatches-for-5pct"], rtol=0, atol=0.5),
             "Solve (p−1)/(m+p−1) <= 0.05 for m, and round up.",
             "(p−1)/(m+p−1) <= t  =>  m >= (p−1)(1/t − 1)."),
    Exercise("interleaved-bubble",
             "Interleaved 1F1B at p = 8, m = 32, v = 2 chunks per rank (forward = 1/v unit per "
             "chunk, backward twice that). What fraction of the step is bubble? This chapter's "
             "simulator (cost.ideal_bubble) is the judge.",
             numeric(_A["interleaved-bubble"], rtol=0.02),
             "Each fill / drain slot is v times shorter.",
             "(p−1)/(v·m+p−1); the simulated schedule agrees."),
    Exercise("1f1b-memory-gpu",
             "A 1F1B pipeline of p = 12 stages runs m = 48 micro-batches; one micro-batch's "
             "activations on one stage take 3.2 GB. How many GB of activations does stage 3 "
             "(counting from 0) hold at its peak?",
             numeric(_A["1f1b-memory-gpu"], rtol=0.01),
             "1F1B's warm-up on stage s runs p − s − 1 forwards, then one more before its first "
             "backward, and keeps that many in flight.",
             "min(p − s, m) micro-batches × 3.2 GB, whatever m is beyond that."),
    Exercise("zb-bubble",
             "ZB-H1 at p = 8, m = 24 with F = B = W (each 1 unit). What fraction of the step is "
             "bubble?",
             numeric(_A["zb-bubble"], rtol=0.01),
             "W's fill what would be idle: ZB-H1 leaves (p−1)(F+B−W) of idle per stage, over a "
             "step of m(F+B+W) + that.",
             "(p−1)/(3m+p−1), valid since m >= p."),
    Exercise("p2p-bytes",
             "A 70B-class model (hidden C = 8,192) in interleaved 1F1B: p = 8 pipeline ranks, "
             "v = 2 chunks per rank, m = 16 micro-batches of one 4,096-token sequence each, bf16 "
             "activations and gradients. How many GB (1e9 B) does pipeline rank 0 send per step?",
             numeric(_A["p2p-bytes"], rtol=0.01),
             "Rank 0 owns stages 0 and p: it sends activations onward from both and gradients back "
             "from stage p only (stage 0 has no predecessor).",
             "(2v − [first] − [last])·m messages of T·C·2 B — cost.p2p_bytes_per_step."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
