"""Notebook 12's exercises (`parlab.exercises`): the bytes of a job and two jobs crossing over on
64 A100s (Luo et al., CrossoverScheduler, 2021), the batch of Llama 3 8B whose KV cache fits on
4 tensor-parallel A100s (Pope et al., MLSys 2023), the edge split's break-even, the link time the
transfer search prices (Lin & Wang, 2021), and the bytes of a split request (predict, then the
cell after it measures); each check says right or wrong, never the answer.
"""

from __future__ import annotations

from parlab.core import cost as core_cost
from parlab.exercises import Exercise, find, numeric
from parlab.serving import cost, edge
from parlab.serving.explore import edge as ex_edge
from parlab.serving.explore import search as ex_search


def _searched_link_ms() -> float:
    """The `search-latency` exercise: 5 transfers of group 2 to device 0 before block 0, none
    across devices before block 1, 2 devices on Bluetooth 5 LE (its 2M PHY), one image."""
    import torch

    cfg = ex_search.CONFIG
    kept = [torch.zeros(cfg.groups, cfg.groups, cfg.width, dtype=torch.bool) for _ in range(2)]
    kept[0][2, 0, :5] = True
    return 1e3 * cost.edge_comm_seconds(cfg, kept, 2, 1, edge.EDGE_LINKS["Bluetooth"])


def _crossover_gpu() -> float:
    """`crossover-gpu`: jobs of 1.3B (180 ms) and 0.5B (60 ms) parameters, bf16 gradients in one
    bucket, ring all-reduce on 64 GPUs over HDR InfiniBand (α = 2 µs, β = 25 GB/s)."""
    alpha, beta, n = 2e-6, 25e9, 64

    def ring(psi):
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * psi * 2 / beta

    compute, comm = {"A": 0.180, "B": 0.060}, {"A": ring(1.3e9), "B": ring(0.5e9)}
    return cost.crossover_speedup(compute, comm)


def _kv_batch() -> int:
    """`kv-batch`: sequences of 8,192 tokens of Llama 3 8B whose KV cache fits beside its bf16
    weights (2Ψ, embeddings included) on 4 A100s of 80 GB, weights and cache split evenly."""
    from parlab.models.gpt import GPTConfig, param_count
    from parlab.models.presets import PRESETS
    from parlab.serving import inference

    weights = 2 * param_count(GPTConfig(**PRESETS["llama3-8b"]))
    per_seq = inference.kv_bytes(inference.shape("llama3-8b"), 1, 8192)
    return int((4 * 80e9 - weights) // per_seq)


def _edge_total() -> int:
    """`edge-total`: every device's bytes, summed, for 3 images on 4 devices, every feature."""
    return sum(cost.dense_edge_bytes(ex_edge.CONFIG, 4, 3, r) for r in range(4))


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    return {"job-bytes": core_cost.ring_all_reduce(1_300_000_000, 64, 0)[0] * 4,
            "crossover-gpu": _crossover_gpu(), "kv-batch": _kv_batch(),
            "break-even": cost.break_even_bandwidth(0.02, 40_000, 3, 2, 1e-3),
            "search-latency": _searched_link_ms(), "edge-total": _edge_total()}


EXERCISES = [
    Exercise("job-bytes", "Job A at GPU scale: a 1.3B-parameter model trained data-parallel on "
             "64 GPUs, its fp32 gradients in one flat bucket, ring all-reduce. Bytes one GPU sends "
             "per step?", numeric(core_cost.ring_all_reduce(1_300_000_000, 64, 0)[0] * 4,
                                  rtol=0.001),
             "One flat bucket, ring all-reduce: 2(N−1)/N of its Ψ·4 bytes.",
             "2·(N−1)/N · Ψ · 4 B."),
    Exercise("crossover-gpu", "Two jobs share 64 A100s under crossover, each data-parallel over "
             "all 64, bf16 gradients in one bucket, ring all-reduce over HDR InfiniBand (α = 2 µs, "
             "β = 25 GB/s per GPU). Job A: 1.3B parameters, 180 ms of compute per step; job B: "
             "0.5B parameters, 60 ms. Throughput of crossover ÷ running them one after the other "
             "(sequential), in steady state?", numeric(_crossover_gpu(), rtol=0.01),
             "Price each all-reduce 2(N−1)·α + 2(N−1)/N·bytes/β, then the round: the processor's "
             "ΣP, the link's ΣC, or one job's own P + C, whichever is longest.",
             "C_A ≈ 205 ms, C_B ≈ 79 ms; sequential 524 ms; crossover max(240, 284, 385) ms.",
             kind="design"),
    Exercise("kv-batch", "Serve Llama 3 8B (the llama3-8b preset: 8,030,261,248 parameters, "
             "32 layers, 8 key/value heads of 128) in bf16 with tensor parallelism over 4 A100s of "
             "80 GB, weights and KV cache split evenly over the 4. How many sequences of 8,192 "
             "tokens can be in flight at once (the most whose KV cache fits beside the weights)? "
             "Ignore activations and every temporary buffer.", numeric(_kv_batch(), atol=0.5, rtol=0),
             "KV bytes per token: 2 (K and V) · layers · k/v heads · head size · 2 B; the weights "
             "2Ψ; the 4 GPUs pool 4 · 80 GB.",
             "(320 GB − 2Ψ) ÷ (8,192 · 131,072 B) per sequence, rounded down.", kind="design"),
    Exercise("break-even", "A request computes 20 ms on one device; split over 2 it sends 40 KB "
             "(40,000 B) in 3 rounds of α = 1 ms. Above what bandwidth (bytes/s) is the split "
             "faster?", numeric(cost.break_even_bandwidth(0.02, 40_000, 3, 2, 1e-3), rtol=0.01),
             "Solve P/N + kα + bytes/β = P for β.", "40,000 / (0.010 − 0.003) ≈ 5.7 MB/s."),
    Exercise("search-latency", "Two devices on Bluetooth 5 LE (2M PHY, α = 15 ms, β = 250,000 "
             "B/s), one image per request. The search kept 5 channels of device 1's groups for "
             "device 0 before block 0 (8×8 maps) and no transfer across devices before block 1. "
             "Link time of a request in ms, as the search prices it (rounds·α + the busiest "
             "device's bytes / β; device 1 also sends its 10 partial logits)?",
             numeric(_searched_link_ms(), rtol=0.01),
             "A block with no transfer across devices skips its exchange: count the rounds left.",
             "Rounds: block 0 (N−1 = 1) + head (1) = 2 → 30 ms; device 1 sends 5·64·4 + 10·4 = "
             "1,320 B → 5.28 ms; 35.28 ms."),
    Exercise("edge-total", "Predict, then measure: the chapter's grouped network (G = 4 groups of "
             "c = 8 channels, blocks that see the maps printed in section 7, 10 classes, fp32) "
             "split over 4 devices with every feature exchanged, one request of 3 images. How many "
             "bytes do the 4 devices send in all (summed over devices)? The cell after this one "
             "measures it.", numeric(_edge_total(), atol=0.5, rtol=0),
             "Every device sends its groups' channels to each of the 3 others before every mix, "
             "per image; at the head every device but device 0 sends its partial logits.",
             "Σ over devices of ((N−1)·c·Σ side² + classes if not device 0) · images · 4 B.",
             kind="predict"),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
