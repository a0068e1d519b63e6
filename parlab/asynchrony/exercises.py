"""Notebook 09's exercises, at GPU scale so that the chapter's formulas, not its printed numbers,
answer them: a 7B model's bytes into one parameter server and into a sharded one (Li et al.,
"Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014); two design problems
(how many servers keep the busiest one's link under a worker's compute time on H100s and NDR
InfiniBand; the small batch of a slower A100 among H100s, Lu et al. 2025's dual-batch workers);
a straggler's staleness under ASP (Dean et al.'s Downpour SGD, 2012), predicted then measured;
macroiterations of a large Jacobi grid (Bertsekas & Tsitsiklis 1989). The answers come from
`parlab.asynchrony.cost` and `parlab.core.link`, never typed in; each check says right or not
yet, never the answer.
"""

from __future__ import annotations

import math

from parlab.asynchrony import cost
from parlab.asynchrony.explore.predict import straggler_closed_form
from parlab.core.link import ACCELERATORS, REAL
from parlab.exercises import Exercise, find, numeric

PSI_7B = 7_000_000_000
GRID = 4096  # interior points per side of the Jacobi exercise's grid
TOKENS = 16 * 4096  # tokens per worker gradient in the server-count design problem
DUAL_BATCH = 64  # sequences per H100 gradient in the dual-batch design problem


def servers_needed(numel: int = PSI_7B, gpus: int = 64, link: str = "NDR-IB",
                   accelerator: str = "H100", tokens: int = TOKENS) -> int:
    """Smallest k servers (of `gpus`, the rest workers) whose busiest server receives a sync
    update's gradients (one α plus bytes/β) in no more than a worker's compute time 6Ψ·tokens/F."""
    alpha, beta = REAL[link]
    compute = 6 * numel * tokens / ACCELERATORS[accelerator].flops
    return next(k for k in range(1, gpus) if alpha + cost.busiest_server_in(numel, gpus - k, k) / beta
                <= compute)


def small_batch_for(large: int = DUAL_BATCH, fast: str = "H100", slow: str = "A100") -> int:
    """Largest whole batch whose gradient takes the `slow` GPU no longer than `large` takes the
    `fast` one (compute 6Ψ·b·L/F; the pull and push cost both the same and cancel)."""
    return math.floor(large * ACCELERATORS[slow].flops / ACCELERATORS[fast].flops + 1e-9)


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    return {"server-bytes": cost.server_bytes_per_update(PSI_7B, 63, "ssp")[0],
            "sharded-bytes": cost.server_bytes_per_update(PSI_7B, 60, "ssp", 4)[0][0],
            "server-count": servers_needed(),
            "dual-small-batch": small_batch_for(),
            "straggler-staleness": straggler_closed_form(5, 4),
            "macroiterations": cost.macroiterations_for(cost.jacobi_gamma(1.0 / (GRID + 1) ** 2), 1e-6)}


_A = answers()

EXERCISES = [
    Exercise("server-bytes", "A 7B-parameter model (Ψ = 7·10⁹, fp32 on the wire) trained with ps-sync "
             "on 64 GPUs: one is the parameter server, 63 are workers. Bytes INTO the server per update, "
             "headers included?", numeric(_A["server-bytes"], rtol=1e-6),
             "Every worker pushes one header (two int64) and Ψ float32 per update.",
             "W · (16 + 4Ψ)"),
    Exercise("sharded-bytes", "The same 64 GPUs and 7B model, now with servers = 4 (ranks 0–3 serve "
             "a quarter of Ψ each, 60 workers). Bytes INTO server 0 per update, headers included?",
             numeric(_A["sharded-bytes"], rtol=1e-6),
             "Server i holds Ψ/k elements; every worker pushes it one header and its slice.",
             "W · (16 + 4Ψ/k), W = 64 − 4"),
    Exercise("server-count", "Design: the same 7B model (fp32 gradients) with ps-sync on 64 H100s "
             "(400 TFLOP/s sustained each) joined by NDR InfiniBand (400 Gbit/s = 50 GB/s per GPU, "
             "α = 2 µs). k ranks serve a 1/k slice of Ψ each, the other 64 − k are workers, each "
             "computing its gradient on 16 sequences of 4,096 tokens. What is the smallest k for which "
             "the busiest server receives one update's gradients (headers included) in no more time "
             "than a worker takes to compute its gradient?",
             numeric(_A["server-count"], rtol=0),
             "A worker computes 6·Ψ·tokens FLOPs; the busiest server receives (64 − k)·(16 + 4·⌈Ψ/k⌉) "
             "bytes through one link: α + bytes/β.",
             "smallest k with α + (64 − k)(16 + 4Ψ/k)/β ≤ 6Ψ·65,536/F", kind="design"),
    Exercise("dual-small-batch",
             "Design (dual-batch workers, Lu et al. 2025): a 1.5B-parameter model on an "
             "asynchronous parameter server, H100 workers (400 TFLOP/s sustained) each computing "
             "64 sequences per gradient, and one A100 (150 TFLOP/s sustained) that should not be a "
             "straggler. The largest whole number of sequences the A100 may compute per gradient "
             "so that its gradient takes no longer than an H100's (same sequence length; pulls and "
             "pushes cost both GPUs the same)?",
             numeric(_A["dual-small-batch"], rtol=0),
             "Compute time is 6·Ψ·b·L/F: equal times need b_small/b_large = F_A100/F_H100.",
             "⌊64 · 150/400⌋; its update is then applied with lr × b/64", kind="design"),
    Exercise("straggler-staleness", "Predict, then run the cell below: ps-async on 6 ranks (rank 0 "
             "serves, 5 workers), all equally fast except the last, which is 4× slower on every "
             "gradient (no jitter, seeded arrival order). How many versions behind is each of the "
             "straggler's gradients when the server applies it?",
             numeric(_A["straggler-staleness"], rtol=0), "While the straggler computes one gradient, "
             "count the gradients the other workers push.",
             "r·(W − 1): each of the 4 fast workers pushes 4 gradients meanwhile", kind="predict"),
    Exercise("macroiterations", "Jacobi on −Δu + u = f on the unit square, a 4,096 × 4,096 interior "
             "grid (h = 1/4,097, so σh² = h²), strips over 1,024 GPUs: how many macroiterations "
             "guarantee ‖u − u*‖∞ ≤ 1e-6·‖u₀ − u*‖∞, whatever the delays?",
             numeric(_A["macroiterations"], rtol=1e-3),
             "Each macroiteration contracts the max-norm error by γ = 4/(4 + σh²).",
             "⌈ln 1e-6 / ln γ⌉"),
]


def exercise(name: str) -> Exercise:
    return find(EXERCISES, name)
