"""Notebook 12's exercises (`parlab.exercises`): the bytes and balance of two jobs sharing ranks
(Luo et al., CrossoverScheduler, 2021), when a job is compute-bound, the edge split's bytes and its
break-even; each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric
from parlab.serving import cost, explore_edge
from parlab.serving.explore import jobs


def _job_a_bytes(n: int) -> int:
    cfg = jobs(n)[0].config(n, 1)
    return cost.job_bytes(cfg)[0]


EXERCISES = [
    Exercise("job-bytes", "Bytes rank 0 of job A (the tiny GPT) sends per step on 4 ranks?",
             numeric(_job_a_bytes(4), rtol=0.001),
             "One flat bucket, ring all-reduce: 2(N−1)/N of its Ψ·4 bytes.",
             "Ψ_A = 8,352 parameters in one bucket: 2·3/4·8,352·4 = 50,112 bytes."),
    Exercise("balanced", "Each job computes 40 ms and communicates 40 ms per step. Crossover "
             "throughput ÷ sequential, in steady state?", numeric(2.0, rtol=0.01),
             "Sequential: 4 phases in a row. Crossover: the processor and the link each busy 80 ms.",
             "(40+40+40+40) / max(80, 80, 80) = 2."),
    Exercise("compute-bound", "P = 50 ms, C = 10 ms for both jobs: crossover ÷ sequential?",
             numeric(1.2, rtol=0.01), "The processor is the bottleneck: Σ P per round.",
             "120 / max(100, 20, 60) = 1.2."),
    Exercise("edge-bytes", "All features exchanged on 4 devices: bytes device 1 sends per image "
             "(G=4 groups of c=8 channels, blocks see 8×8 and 4×4 maps, 10 classes, fp32)?",
             numeric(cost.dense_edge_bytes(explore_edge.CONFIG, 4, 1, rank=1), rtol=0.001),
             "Each block: its c channels to each of the 3 others; then its partial logits.",
             "3·8·(64+16)·4 + 10·4 = 7,720 bytes."),
    Exercise("break-even", "A request computes 20 ms on one device; split over 2 it sends 40 KB "
             "(40,000 B) in 3 rounds of α = 1 ms. Above what bandwidth (bytes/s) is the split "
             "faster?", numeric(cost.break_even_bandwidth(0.02, 40_000, 3, 2, 1e-3), rtol=0.01),
             "Solve P/N + kα + bytes/β = P for β.", "40,000 / (0.010 − 0.003) ≈ 5.7 MB/s."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
