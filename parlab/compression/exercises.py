"""Notebook 08's exercises (`parlab.exercises`), at GPU scale so that the chapter's closed forms
(`parlab.compression.cost`, held equal to the ledger by the tests), not its printed numbers, answer
them: top-k's bytes (top-k with error feedback; DGC, Lin et al. 2018, adds momentum correction and
more), PowerSGD's floats (Vogels et al., 2019), PowerSGD's rank and Local SGD's period (Stich
2019) under an InfiniBand budget at gpt2-xl's size (design), PowerSGD's bytes on §7's network
(predicted, then measured by `explore.predict.powersgd_bytes`), and Kwon et al.'s (AISTATS 2024)
compressed network; each check says right or wrong, never the answer.
"""

from __future__ import annotations

import math

from parlab.compression import cost
from parlab.exercises import Exercise, find, numeric

GPT7B = [(7_000_000_000,)]  # a 7B model's gradients as one flat tensor


# gpt2-xl's block matrices in this package's GPT (width C = 1,600, 48 blocks): the attention's
# C×3C and C×C, the MLP's C×4C and 4C×C — Σ(n + m) = 16·C per block
GPT2XL_EDGES = 48 * 16 * 1600
GPT2XL_PARAMS = 1_556_920_000  # the gpt2-xl preset in this package's GPT (no biases, tied head)
HDR_IB = 25e9  # B/s per GPU (parlab.core.link.REAL["HDR-IB"])

# the predict-then-run exercise's setting: `explore.predict.powersgd_bytes` runs it
PREDICT = {"world_size": 4, "d": 48, "depth": 3, "rank": 3}


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    ring = 2 * 63 / 64 * 4  # bytes per float of a ring all-reduce over 64 GPUs, per GPU
    per_sync = ring * GPT2XL_PARAMS / HDR_IB  # seconds: one all-reduce of every parameter
    n, d, L, r = (PREDICT[k] for k in ("world_size", "d", "depth", "rank"))
    return {"topk-bytes-gpu": cost.bytes_per_step("topk", GPT7B, 64, ratio=0.01)["all_gather"],
            "powersgd-floats-gpu": sum(cost.powersgd_elements([(12288, 49152)], 4)),
            "powersgd-rank-ib": int(10e-3 / (ring * GPT2XL_EDGES / HDR_IB)),
            "localsgd-period": math.ceil(per_sync / (0.05 * 0.5)),
            "powersgd-bytes-run": 2 * (n - 1) / n * 4 * L * (d + d) * r,
            "lowdim-bytes-gpu": 2 * 7 / 8 * cost.dln_params(8192, 64, 4) * 4 / 1e6}


_A = answers()

# ----------------------------------------------------------------------------- Exercise form
# (`parlab.exercises`): Kwon et al. (AISTATS 2024), the compressed deep linear network at GPU scale
EXERCISES = [
    Exercise("topk-bytes-gpu", "Top-k at ratio 0.01 on a 7B-parameter model's gradients taken as one "
             "flat tensor (k = ⌈0.01·n⌉ pairs of int32 index and fp32 value), all-gathered over "
             "N = 64 GPUs. Bytes each GPU sends per step?", numeric(_A["topk-bytes-gpu"], rtol=0.005),
             "A message is 8 bytes per kept entry; a ring all-gather forwards the other N−1 ranks' "
             "messages.", "(N−1) · 8 · ⌈ratio · n⌉"),
    Exercise("powersgd-floats-gpu", "PowerSGD at rank r = 4 on one 12,288 × 49,152 weight matrix (a "
             "GPT-3 MLP projection). Floats one GPU contributes to its two all-reduces?",
             numeric(_A["powersgd-floats-gpu"], rtol=0, atol=0.5),
             "P = M Q is rows × r, then Q = Mᵀ P is cols × r.", "(rows + cols) · r"),
    Exercise("powersgd-rank-ib", "Design: gpt2-xl (48 blocks of width 1,600; each block's "
             "matrices 1,600×4,800, 1,600×1,600, 1,600×6,400 and 6,400×1,600) trained on 64 GPUs "
             "over HDR InfiniBand (25 GB/s per GPU), PowerSGD on those matrices only. Budget: 10 ms "
             "of link time per step for PowerSGD's two ring all-reduces (fp32, latency left out). "
             "The largest rank r?", numeric(_A["powersgd-rank-ib"], rtol=0, atol=0.5),
             "Floats per step: r·Σ(n + m) over the matrices; a ring all-reduce sends 2(N−1)/N of "
             "its buffer.", "2·63/64·4 B · r · 48·16·1,600 ÷ 25 GB/s ≤ 10 ms ⇔ r ≤ 25.8",
             kind="design"),
    Exercise("localsgd-period", "Design: Local SGD on gpt2-xl (1,556,920,000 fp32 parameters), 64 GPUs "
             "over HDR InfiniBand (25 GB/s per GPU), a compute step of 500 ms. The parameters are "
             "ring all-reduced every H steps and not overlapped with compute. The smallest H that "
             "keeps the averaging below 5% of the compute time, amortised per step?",
             numeric(_A["localsgd-period"], rtol=0, atol=0.5),
             "One all-reduce of every parameter costs 2(N−1)/N·4Ψ/β; divide by H.",
             "2·63/64·4·Ψ ÷ 25 GB/s ≈ 0.49 s per averaging; 0.49 s / H ≤ 25 ms ⇔ H ≥ 19.6",
             kind="design"),
    Exercise("powersgd-bytes-run", "Predict, then run: the original deep linear network of §7 "
             "(depth L = 3, every layer d×d with d = 48) trained data-parallel on N = 4 ranks with "
             "its gradient sent as PowerSGD rank r = 3 factors (P then Q, each ring all-reduced, "
             "fp32). Bytes rank 0 sends per step? The next cell runs it and prints the ledger.",
             numeric(_A["powersgd-bytes-run"], rtol=0.001),
             "Per matrix P is d×r and Q is d×r; a ring all-reduce sends 2(N−1)/N of its buffer.",
             "2·(N−1)/N · 4 B · L · (d + d) · r", kind="predict"),
    Exercise("lowdim-bytes-gpu",
             "A depth-4 deep linear network of width d = 8192 is compressed to width r̂ = 64 (Kwon "
             "et al.: W_1 r̂×d, two r̂×r̂ inner layers, W_4 d×r̂) and trained data-parallel on "
             "N = 8 GPUs in fp32. How many MB (10^6 bytes) does each GPU send per step in the ring "
             "all-reduce of its gradients?",
             numeric(_A["lowdim-bytes-gpu"], rtol=0.01),
             "Count the parameters first: 2·d·r̂ + (L−2)·r̂². A ring all-reduce sends 2(N−1)/N of "
             "the buffer, 4 bytes a float.",
             "Ψ = 2·8192·64 + 2·64² = 1,056,768 floats; 2·7/8·Ψ·4 B = 7.40 MB per GPU per step — the "
             "original network (4·8192² floats) would send 1,879 MB."),
]


def exercise(name: str) -> Exercise:
    """The chapter's exercise `name` (`EXERCISES`)."""
    return find(EXERCISES, name)
