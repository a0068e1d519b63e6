"""Notebook 12's exercises (`parlab.exercises`): the bytes and balance of two jobs sharing ranks
(Luo et al., CrossoverScheduler, 2021), when a job is compute-bound, the edge split's bytes and its
break-even, and the link time the transfer search prices (Lin & Wang, 2021, search the
transmission policy with latency in the objective); each check says right or wrong, never the
answer.
"""

from __future__ import annotations

from parlab.exercises import Exercise, find, numeric
from parlab.serving import cost, edge, explore_edge, explore_search
from parlab.serving.explore import jobs


def _searched_link_ms() -> float:
    """The `search-latency` exercise: 5 transfers of group 2 to device 0 before block 0, none
    across devices before block 1, 2 devices on the Bluetooth-like link, one image."""
    import torch

    cfg = explore_search.CONFIG
    kept = [torch.zeros(cfg.groups, cfg.groups, cfg.width, dtype=torch.bool) for _ in range(2)]
    kept[0][2, 0, :5] = True
    return 1e3 * cost.edge_comm_seconds(cfg, kept, 2, 1, edge.EDGE_LINKS["Bluetooth"])


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
    Exercise("search-latency", "Two devices on the Bluetooth-like link (α = 15 ms, β = 250,000 "
             "B/s), one image per request. The search kept 5 channels of device 1's groups for "
             "device 0 before block 0 (8×8 maps) and no transfer across devices before block 1. "
             "Link time of a request in ms, as the search prices it (rounds·α + the busiest "
             "device's bytes / β; device 1 also sends its 10 partial logits)?",
             numeric(_searched_link_ms(), rtol=0.01),
             "A block with no transfer across devices skips its exchange: count the rounds left.",
             "Rounds: block 0 (N−1 = 1) + head (1) = 2 → 30 ms; device 1 sends 5·64·4 + 10·4 = "
             "1,320 B → 5.28 ms; 35.28 ms."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
