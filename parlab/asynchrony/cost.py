"""Closed forms of chapter 09: the parameter server's bytes, and the contraction condition of
asynchronous iterations.

Every job moves one header and one flat tensor each way (`parlab.asynchrony.server`): a message
of M = 16 + 4Ψ bytes (two int64, Ψ float32). Per update the server's link carries W·M each way
under ssp / sync but only M under async: a server's bandwidth grows with W under synchronous
schemes, which is why Li et al. (OSDI 2014) shard the parameters over several servers (k servers
cut the busiest link by k). The bytes of every role, sharded or not: docs/messages.md.

Async job counts depend on timing: with `delays="seeded"` they are the seeded schedule's
(`parlab.asynchrony.versions.simulate`), else split evenly (only their sum is sure to match).
`ps-dualbatch` (Lu et al. 2025) moves ps-async's messages with its own schedule's job counts.

Asynchronous iterations x ← Mx + c converge for every pattern of bounded delays iff ρ(|M|) < 1
(Chazan & Miranker 1969; Baudet 1978); synchronous ones iff ρ(M) < 1 (`contraction`).
"""

from __future__ import annotations

import math

import torch

from parlab.asynchrony.delays import DelaySchedule, VirtualClock
from parlab.asynchrony.versions import Book, simulate
from parlab.core.cost import shard_sizes
from parlab.engine.prediction import Prediction, param_numels

HEADER_BYTES = 16  # [version, job] as int64
FLOAT_BYTES = 4


def message_bytes(numel: int) -> int:
    """M: one header and Ψ float32 (a pull's params or a push's gradient)."""
    return HEADER_BYTES + FLOAT_BYTES * numel


def shard_messages(numel: int, servers: int = 1) -> list[int]:
    """M_i of each server i: one header and its Ψ_i float32 (`shard_sizes(Ψ, k)`)."""
    return [message_bytes(size) for size in shard_sizes(numel, servers)]


def ssp_bytes(numel: int, workers: int, steps: int, servers: int = 1) -> list[int]:
    """Bytes each rank sends over a ps-sync / ps-ssp run: [server 0..k−1, worker 1, ..., worker W]."""
    ms = shard_messages(numel, servers)
    return [steps * workers * m for m in ms] + [steps * sum(ms)] * workers


def async_bytes(numel: int, jobs: dict[int, int], steps: int, servers: int = 1) -> list[int]:
    """Bytes each rank sends over a ps-async run, given each worker's job count."""
    ms, workers = shard_messages(numel, servers), len(jobs)
    return ([steps * ms[0] + HEADER_BYTES * workers] + [(steps + workers) * m for m in ms[1:]]
            + [jobs[w] * sum(ms) + HEADER_BYTES * (servers - 1) for w in sorted(jobs)])


def server_bytes_per_update(numel: int, workers: int, mode: str, servers: int = 1):
    """(bytes into a server, bytes out of it) per update, in the steady state: one pair with
    servers=1, else a list of one pair per server."""
    pairs = [(workers * m, workers * m) if mode == "ssp" else (m, m) for m in shard_messages(numel, servers)]
    return pairs[0] if servers == 1 else pairs


def schedule_of(cfg) -> DelaySchedule:
    o = cfg.options
    return DelaySchedule(cfg.world_size - o.get("servers", 1), cfg.seed, o["straggler"], o["jitter"])


def async_jobs(cfg, schedule: DelaySchedule | None = None) -> tuple[dict[int, int], bool]:
    """(jobs per worker, exact?) of a ps-async run: exact with one worker or seeded delays
    (`schedule`: the virtual clock's, when it is not `schedule_of(cfg)`)."""
    workers = cfg.world_size - cfg.options.get("servers", 1)
    if workers == 1:
        return {1: cfg.steps}, True
    if cfg.options["delays"] == "seeded":
        book = simulate(Book(workers, cfg.steps, "asp"), VirtualClock(schedule or schedule_of(cfg)))
        return book.jobs_per_worker(), True
    return {w: cfg.steps // workers + (w <= cfg.steps % workers) for w in range(1, workers + 1)}, False


class PSCost:
    """`register(cost=...)` of the parameter-server schemes."""

    def __init__(self, mode: str):
        self.mode = mode

    def __call__(self, cfg) -> Prediction:
        numel, servers = sum(param_numels(cfg)), cfg.options.get("servers", 1)
        if self.mode == "ssp":
            return Prediction(ssp_bytes(numel, cfg.world_size - servers, cfg.steps, servers),
                              "S·W·(16 + 4Ψ_i) from server i, S·(16k + 4Ψ) from each worker")
        jobs, exact = async_jobs(cfg)
        how = ("the seeded schedule's jobs" if exact
               else "jobs split evenly (timing decides: only the sum is exact)")
        return Prediction(async_bytes(numel, jobs, cfg.steps, servers),
                          f"S·M_0 + 16·W from server 0, (S + W)·M_i from server i > 0, "
                          f"J_w·Σ M_i + 16(k − 1) from worker w (M_i = 16 + 4Ψ_i); {how}")


def halo_bytes(n: int, messages: int) -> int:
    """Bytes of `messages` Jacobi halo messages: (4 + n) float64 each (stamp, generation, final,
    unused, one boundary row). Synchronous: sweeps messages to each neighbour; asynchronous: as many
    as the sender threads sent (timing decides), each the same size."""
    return messages * (4 + n) * 8


def contraction(matrix: torch.Tensor) -> tuple[float, float]:
    """(ρ(M), ρ(|M|)) of an iteration matrix: synchronous iterations converge iff the first is
    < 1, totally asynchronous ones for every delay pattern iff the second is (Chazan–Miranker)."""
    rho = torch.linalg.eigvals(matrix.double()).abs().max().item()
    rho_abs = torch.linalg.eigvals(matrix.double().abs()).abs().max().item()
    return rho, rho_abs


# ----------------------------------------------------------------------------- the exercises' closed forms
def busiest_server_in(numel: int, workers: int, servers: int = 1) -> int:
    """Bytes into the busiest server per ps-sync update: W·M_0 (server 0 holds the largest slice)."""
    return workers * shard_messages(numel, servers)[0]


def sharding_effects(numel: int, world_size: int, servers: int) -> dict:
    """The busiest server's bytes in per sync update when `servers` of `world_size` ranks serve,
    split into its two causes: the role change (k − 1 workers became servers: W = N − 1 → N − k)
    and the sharding proper (M → M_0 at equal W). The product of the two factors is the drop."""
    before = busiest_server_in(numel, world_size - 1)
    equal_w = busiest_server_in(numel, world_size - servers)
    after = busiest_server_in(numel, world_size - servers, servers)
    return {"one server": before, "one server, same W": equal_w, "sharded": after,
            "role factor": before / equal_w, "shard factor": equal_w / after, "total factor": before / after}


def asp_steady_staleness(workers: int) -> int:
    """ASP with W equally fast workers: while one computes, each of the W − 1 others pushes once."""
    return workers - 1


def ssp_lead(staleness: int) -> int:
    """Clocks the fastest worker may run ahead of the slowest under SSP (Ho et al. 2013): starting
    clock c' needs version ≥ c' − s, and the version is c while clock c is unfinished: c' − c ≤ s."""
    return staleness


def jacobi_gamma(sigma_h2: float) -> float:
    """γ = 4/(4 + σh²): the max-norm contraction of one Jacobi sweep of −Δu + σu = f."""
    return 4.0 / (4.0 + sigma_h2)


def macroiterations_for(gamma: float, reduction: float) -> int:
    """Macroiterations m with γ^m ≤ reduction (Bertsekas & Tsitsiklis: one γ per macroiteration)."""
    return math.ceil(math.log(reduction) / math.log(gamma))
