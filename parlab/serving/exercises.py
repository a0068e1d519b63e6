"""Notebook 12's exercises (`parlab.exercises`): the bytes and balance of two jobs sharing ranks
(Luo et al., CrossoverScheduler, 2021), when a job is compute-bound, the edge split's bytes and its
break-even, and the link time the transfer search prices (Lin & Wang, 2021, search the
transmission policy with latency in the objective); each check says right or wrong, never the
answer.
"""

from __future__ import annotations

from parlab.core import cost as core_cost
from parlab.exercises import Exercise, find, numeric
from parlab.serving import cost, edge
from parlab.serving.explore import edge as ex_edge
from parlab.serving.explore import search as ex_search


def _searched_link_ms() -> float:
    """The `search-latency` exercise: 5 transfers of group 2 to device 0 before block 0, none
    across devices before block 1, 2 devices on the Bluetooth-like link, one image."""
    import torch

    cfg = ex_search.CONFIG
    kept = [torch.zeros(cfg.groups, cfg.groups, cfg.width, dtype=torch.bool) for _ in range(2)]
    kept[0][2, 0, :5] = True
    return 1e3 * cost.edge_comm_seconds(cfg, kept, 2, 1, edge.EDGE_LINKS["Bluetooth"])


def _wider_edge_bytes() -> int:
    """`edge-bytes`: the closed form for c = 16 channels per group and maps of 16² and 8²."""
    cfg = ex_edge.CONFIG
    features = (4 - 1) * (cfg.groups // 4) * 16 * (16 * 16 + 8 * 8)
    return (features + cfg.classes) * cost.FP32


EXERCISES = [
    Exercise("job-bytes", "Job A at GPU scale: a 1.3B-parameter model trained data-parallel on "
             "64 GPUs, its fp32 gradients in one flat bucket, ring all-reduce. Bytes one GPU sends "
             "per step?", numeric(core_cost.ring_all_reduce(1_300_000_000, 64, 0)[0] * 4,
                                  rtol=0.001),
             "One flat bucket, ring all-reduce: 2(N−1)/N of its Ψ·4 bytes.",
             "2·(N−1)/N · Ψ · 4 B."),
    Exercise("balanced", "Each job computes 40 ms and communicates 40 ms per step. Crossover "
             "throughput ÷ sequential, in steady state?", numeric(2.0, rtol=0.01),
             "Sequential: 4 phases in a row. Crossover: the processor and the link each busy 80 ms.",
             "(40+40+40+40) / max(80, 80, 80) = 2."),
    Exercise("compute-bound", "P = 50 ms, C = 10 ms for both jobs: crossover ÷ sequential?",
             numeric(1.2, rtol=0.01), "The processor is the bottleneck: Σ P per round.",
             "120 / max(100, 20, 60) = 1.2."),
    Exercise("edge-bytes", "A wider split: all features exchanged on 4 devices, G = 4 groups of "
             "c = 16 channels, blocks that see 16×16 and 8×8 maps, 10 classes, fp32. Bytes device 1 "
             "sends per image?", numeric(_wider_edge_bytes(), rtol=0.001),
             "Each block: its c channels to each of the 3 others; then its partial logits.",
             "(N−1)·c·Σ side² · 4 B + classes · 4 B."),
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
