"""Notebook 09's exercises: each `check(answer)` says right or wrong, never the answer.

Server bytes (Li et al., OSDI 2014, sharded too), ASP staleness (Dean et al. 2012), SSP's bound
(Ho et al., NeurIPS 2013), macroiterations (Bertsekas & Tsitsiklis 1989) and the contraction
condition (Chazan & Miranker 1969); the answers come from `parlab.asynchrony.cost` and the
server's book, never typed in.
"""

from __future__ import annotations

import math

from parlab.asynchrony import cost
from parlab.asynchrony.explore import schedule
from parlab.exercises import Exercise, numeric, one_of


def _asp_steady_staleness(workers: int = 4) -> int:
    book, _ = schedule("asp", workers, 40, straggler=1.0)
    hist = book.staleness_histogram()
    return max(hist, key=hist.get)


def _macro_needed(sigma_h2: float = 0.2, tol: float = 1e-6) -> int:
    return math.ceil(math.log(tol) / math.log(4 / (4 + sigma_h2)))


EXERCISES = [
    Exercise("server-bytes", "ps-sync with W = 7 workers and Ψ = 1,000,000 parameters: how many bytes go "
             "INTO the server per update (headers included)?",
             numeric(7 * cost.message_bytes(1_000_000), rtol=1e-9),
             "Every worker pushes one header (two int64) and Ψ float32 per update.",
             "W·(16 + 4Ψ) = 7 · 4,000,016 = 28,000,112 bytes"),
    Exercise("sharded-bytes", "ps-sync with W = 6 workers, Ψ = 1,000,000 parameters and servers = 4: how "
             "many bytes go INTO server 0 per update (headers included)?",
             numeric(cost.server_bytes_per_update(1_000_000, 6, "ssp", 4)[0][0], rtol=1e-9),
             "Server i holds Ψ/k elements; every worker pushes it one header and its shard of the gradient.",
             "W·(16 + 4Ψ/k) = 6 · 1,000,016 = 6,000,096 bytes"),
    Exercise("asp-staleness", "ps-async with 4 equally fast workers and no jitter: in the steady state, how "
             "many versions behind is almost every gradient?",
             numeric(_asp_steady_staleness(4), rtol=0),
             "While one worker computes, each of the others pushes once.",
             "W − 1 = 3: the other three workers' gradients are applied while it computes"),
    Exercise("ssp-ahead", "ps-ssp with staleness s = 3: while the slowest worker is still computing "
             "clock c, up to which clock may the fastest worker already be computing? (answer c + ?)",
             numeric(3, rtol=0),
             "Starting clock c' needs version ≥ c' − s, and the version is c while clock c is unfinished.",
             "c' − c ≤ s: the fastest may run s = 3 clocks ahead, on clock c + 3"),
    Exercise("macroiterations", "Jacobi on −Δu + σu = f with σh² = 0.2: how many macroiterations guarantee "
             "‖u − u*‖∞ ≤ 1e-6·‖u₀ − u*‖∞, whatever the delays?",
             numeric(_macro_needed(), rtol=0),
             "Each macroiteration contracts the max-norm error by γ = 4/(4 + σh²).",
             "⌈ln 1e-6 / ln(4/4.2)⌉ = 284"),
    Exercise("chaotic", "M = [[0.6, 0.6], [−0.6, 0.6]] has ρ(M) ≈ 0.85. Does x ← Mx + c converge under every "
             "pattern of bounded delays? (yes / no)",
             one_of("no"),
             "Chazan–Miranker: the condition is on |M|, the matrix of absolute values.",
             "No: ρ(|M|) = 1.2 > 1, so some delay pattern makes it diverge"),
]


def exercise(name: str) -> Exercise:
    from parlab.exercises import find
    return find(EXERCISES, name)
