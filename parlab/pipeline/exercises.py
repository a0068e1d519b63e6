"""Chapter 04's exercises (`parlab.exercises`): bubbles of GPipe, 1F1B and interleaved schedules,
bytes between stages, activations in flight; each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric
from parlab.pipeline import cost
from parlab.pipeline.schedules import make_schedule


def _interleaved_bubble(pp: int = 4, microbatches: int = 8, chunks: int = 2) -> float:
    return cost.ideal_bubble(make_schedule("interleaved", pp, microbatches, chunks),
                             forward=1.0 / chunks)


def _p2p_bytes_1f1b(pp: int = 2, microbatches: int = 4) -> int:
    """Bytes pipeline rank 0 sends per step in pp-1f1b at the default GPT and batch."""
    from parlab.engine.runner import make_config

    cfg = make_config("pp-1f1b", world_size=pp, microbatches=microbatches)
    mc = cfg.model_config
    numel = cfg.batch_size // microbatches * mc.block_size * mc.n_embd
    return cost.p2p_bytes_per_step(pp, 1, microbatches, 0, numel)


EXERCISES = [
    Exercise("gpipe-bubble-gpu",
             "GPipe on p = 8 stages with m = 32 micro-batches, equal stages. What fraction of the "
             "step is bubble? (A fraction, e.g. 0.25.)",
             numeric(7 / 39, rtol=0.01),
             "Every stage idles (p−1) slots of forward+backward out of (m+p−1).",
             "(p−1)/(m+p−1) = 7/39 = 0.179."),
    Exercise("microbatches-for-10pct",
             "1F1B on p = 4 stages: what is the smallest number of micro-batches m that brings the "
             "bubble to 10% or less?",
             numeric(27, rtol=0, atol=0.5),
             "Solve (p−1)/(m+p−1) <= 0.1 for m.",
             "3/(m+3) <= 0.1  =>  m + 3 >= 30  =>  m = 27."),
    Exercise("interleaved-bubble",
             "Interleaved 1F1B at p = 4, m = 8, v = 2 chunks per rank (forward = 1/v unit per "
             "chunk, backward twice that). What fraction of the step is bubble? This chapter's "
             "simulator (cost.ideal_bubble) is the judge.",
             numeric(_interleaved_bubble(), rtol=0.02),
             "Each fill / drain slot is v times shorter: (p−1)/(v·m+p−1).",
             "(p−1)/(v·m+p−1) = 3/19 = 0.158; the simulated schedule agrees."),
    Exercise("1f1b-memory-gpu",
             "A 1F1B pipeline of p = 8 stages runs m = 32 micro-batches; one micro-batch's "
             "activations on one stage take 2 GB. How many GB of activations does stage 0 hold at "
             "its peak? (GPipe would hold 64 GB.)",
             numeric(16, rtol=0.01),
             "1F1B's warm-up on stage s runs p − s forwards before its first backward, then keeps "
             "that many in flight.",
             "Stage 0 holds p = 8 micro-batches: 8 · 2 GB = 16 GB, whatever m is."),
    Exercise("zb-bubble",
             "ZB-H1 at p = 4, m = 8 with F = B = W (each 1 unit). What fraction of the step is "
             "bubble?",
             numeric(3 / 27, rtol=0.01),
             "W's fill what would be idle: ZB-H1 leaves (p−1)(F+B−W) of idle per stage, over a "
             "step of m(F+B+W) + that.",
             "(p−1)/(3m+p−1) = 3/27 = 0.111 (valid since m >= p)."),
    Exercise("p2p-bytes",
             "Run on this machine: how many bytes does rank 0 send per step in pp-1f1b at p = 2, "
             "m = 4 for the default GPT and batch (12 rows, T = 32, C = 32)? Check afterwards with "
             "parlab.run('pp-1f1b', world_size=2, microbatches=4, steps=1).bytes_per_rank("
             "op='send', phase='pp-fwd')[0].",
             numeric(_p2p_bytes_1f1b(), rtol=0, atol=0.5),
             "Rank 0 is the first stage: it sends each micro-batch's activation forward and "
             "receives gradients (it sends none back). One activation is (12/m)·T·C floats.",
             "m · (12/4)·32·32 · 4 B = 4 · 12,288 B = 49,152 B."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
