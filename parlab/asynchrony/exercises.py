"""Notebook 09's exercises, at GPU scale so that the chapter's formulas, not its printed numbers,
answer them: a 7B model's bytes into one parameter server and into a sharded one (Li et al.,
"Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014), the role change
hidden in "sharding" (k − 1 workers become servers), ASP's steady staleness (Dean et al.'s
Downpour SGD, 2012), SSP's lead (Ho et al., NeurIPS 2013), macroiterations of a large Jacobi
grid (Bertsekas & Tsitsiklis 1989) and the Chazan–Miranker (1969) condition. The answers come
from `parlab.asynchrony.cost`, never typed in; each check says right or not yet, never the answer.
"""

from __future__ import annotations

import torch

from parlab.asynchrony import cost
from parlab.exercises import Exercise, find, numeric

PSI_7B = 7_000_000_000
GRID = 4096  # interior points per side of the Jacobi exercise's grid


def answers() -> dict:
    """The right answers (tests use them; the notebook never prints them)."""
    effects = cost.sharding_effects(PSI_7B, 64, 4)
    return {"server-bytes": cost.server_bytes_per_update(PSI_7B, 63, "ssp")[0],
            "sharded-bytes": cost.server_bytes_per_update(PSI_7B, 60, "ssp", 4)[0][0],
            "role-change": effects["role factor"],
            "asp-staleness": cost.asp_steady_staleness(256),
            "ssp-ahead": cost.ssp_lead(4),
            "macroiterations": cost.macroiterations_for(cost.jacobi_gamma(1.0 / (GRID + 1) ** 2), 1e-6),
            "chaotic": 1.0 / cost.contraction(torch.tensor([[1.0, 1.0], [-1.0, 1.0]]))[1]}  # ρ(|M|) ∝ a


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
    Exercise("role-change", "Of the drop in the busiest server's inbound bytes from 1 server (63 "
             "workers) to 4 servers (60 workers) on those 64 GPUs, what factor comes from the role "
             "change alone (fewer workers pushing, at the same message size)?",
             numeric(_A["role-change"], rtol=1e-4),
             "Hold the message size fixed and compare W·M before and after three workers became servers.",
             "(N − 1) / (N − k)"),
    Exercise("asp-staleness", "ps-async with 256 equally fast workers and no jitter: in the steady "
             "state, how many versions behind is almost every gradient?",
             numeric(_A["asp-staleness"], rtol=0),
             "While one worker computes, each of the others pushes once.",
             "W − 1: the other workers' gradients are applied while it computes"),
    Exercise("ssp-ahead", "ps-ssp with staleness s = 4 on 1,024 workers: while the slowest worker is "
             "still computing clock c, up to which clock may the fastest already be computing? "
             "(answer the lead: c + ?)", numeric(_A["ssp-ahead"], rtol=0),
             "Starting clock c' needs version ≥ c' − s, and the version is c while clock c is unfinished.",
             "c' − c ≤ s"),
    Exercise("macroiterations", "Jacobi on −Δu + u = f on the unit square, a 4,096 × 4,096 interior "
             "grid (h = 1/4,097, so σh² = h²), strips over 1,024 GPUs: how many macroiterations "
             "guarantee ‖u − u*‖∞ ≤ 1e-6·‖u₀ − u*‖∞, whatever the delays?",
             numeric(_A["macroiterations"], rtol=1e-3),
             "Each macroiteration contracts the max-norm error by γ = 4/(4 + σh²).",
             "⌈ln 1e-6 / ln γ⌉"),
    Exercise("chaotic", "x ← Mx + c with M = [[a, a], [−a, a]], a > 0: below which a does it converge "
             "under every pattern of bounded delays?", numeric(_A["chaotic"], rtol=1e-3),
             "Chazan–Miranker: the condition is on |M|, the matrix of absolute values.",
             "ρ(|M|) < 1, and ρ(|M|) = 2a"),
]


def exercise(name: str) -> Exercise:
    return find(EXERCISES, name)
