"""Closed forms of chapter 12: what two jobs on one cluster send and how long a round of their
steps takes under each schedule (Luo et al., "CrossoverScheduler", 2021), and what a grouped
network split over edge devices sends per request and how long a request takes — the quantities
Lin & Wang ("Communication-Efficient Separable Neural Network for Distributed Inference on Edge
Devices", 2021) trade against accuracy when they search the transmission policy, and the link time
our search (`edge_search`) prices.

Jobs. A job's step all-reduces its gradient buckets (ring: 2(N-1)/N·S elements per rank and
bucket, exact per chunk in `parlab.core.cost`), so its ledger holds steps × those bytes, whatever
the schedule. With compute P_j and communication C_j = Σ_buckets k·α + b/β per step of job j on
one processor and one link:

    sequential round  = Σ_j (P_j + C_j)
    crossover round   = max(Σ_j P_j, Σ_j C_j, max_j (P_j + C_j))

— the processor does every job's compute, the link every job's messages, and a job cannot start
its next step before its own gradients are back. Two balanced jobs (P = C) gain 2×.

Edge. Before block b's mix rank a sends rank b' the channels plan[a][b'] (`masks.send_channels`),
each H_b·W_b floats per image; at the head every rank but 0 sends B × classes floats. With every
channel exchanged (the dense mask) that is (N-1)·(G/N)·c·Σ_b H_b·W_b·B·4 bytes per rank.
A request takes P/N of compute plus its messages; one device alone takes P. Distributing pays off
only above the break-even bandwidth β* = bytes / (P(1 - 1/N) - k·α). Where a device of the split
computes P_N ≠ P/N (launches do not shrink; every device's mix reads every group), P_N replaces
P/N: β* = bytes / (P - P_N - k·α). A block whose mask sends
nothing across devices skips its exchange, so k = (N-1)·(blocks that exchange) + 1.
"""

from __future__ import annotations

import math

from parlab.core import cost as core_cost
from parlab.data_parallel import cost as dp_cost
from parlab.engine.prediction import param_numels
from parlab.serving.grouped import GroupedConfig
from parlab.serving.masks import send_channels

FP32 = core_cost.FP32_BYTES
IMAGE = 16  # pixels per side of the shapes
STEM_POOL = 2  # the stem halves the side; each block halves it again after its mix


# ----------------------------------------------------------------------------- two jobs
def job_messages(cfg) -> list[int]:
    """Elements of each bucket a job all-reduces per step (its `ddp-bucketed` RunConfig `cfg`)."""
    return dp_cost.bucket_numels(param_numels(cfg), cfg.options["bucket_mb"])


def job_bytes(cfg) -> list[int]:
    """Bytes each rank of a job sends over its run: steps × Σ_buckets ring all-reduce."""
    n = cfg.world_size
    return [cfg.steps * sum(core_cost.ring_all_reduce(s, n, rank)[0] * FP32
                            for s in job_messages(cfg)) for rank in range(n)]


def job_memory(cfg) -> dict:
    """Bytes a rank of a job holds at its peak: Ψ fp32 parameters and gradients, AdamW's two
    moments (none for SGD), and the flat buckets its all-reduces run on — 16Ψ + 4Ψ with AdamW."""
    psi = sum(param_numels(cfg))
    return {"params": FP32 * psi, "grads": FP32 * psi,
            "optimizer": 2 * FP32 * psi if cfg.optimizer == "adamw" else 0,
            "comm_buffers": FP32 * sum(job_messages(cfg))}


def sync_seconds(cfg, link) -> float:
    """C: seconds of one step's all-reduces on `link` (rank 0, k·α + bytes/β each, in a row)."""
    if link is None or cfg.world_size == 1:
        return 0.0
    return sum(dp_cost.message_time("all_reduce", s, cfg.world_size, link.latency_s,
                                    link.bandwidth_Bps) for s in job_messages(cfg))


def round_seconds(schedule: str, compute: dict, comm: dict) -> float:
    """Seconds for one step of every job under `schedule`, from each job's compute P and
    communication C per step (see the module docstring). `concurrent` has no closed form: the
    operating system interleaves the jobs; the crossover round is its best case."""
    if schedule == "sequential":
        return sum(compute.values()) + sum(comm.values())
    if schedule in ("crossover", "concurrent"):
        return max(sum(compute.values()), sum(comm.values()),
                   max(compute[j] + comm[j] for j in compute))
    raise ValueError(f"schedule={schedule!r} must be sequential, concurrent or crossover")


def crossover_speedup(compute: dict, comm: dict) -> float:
    """Throughput of crossover ÷ sequential in steady state."""
    return round_seconds("sequential", compute, comm) / round_seconds("crossover", compute, comm)


def run_seconds(schedule: str, compute: dict, update: dict, comm: dict, steps: int) -> float:
    """Seconds of a whole run of `steps` steps of every job under `schedule` ("sequential" or
    "crossover"), warm-up and drain included: the schedule's one thread replayed on one processor
    (compute P_j = forward + backward, update U_j = the optimizer step) and one link that carries
    the jobs' all-reduces in issue order (C_j each). A short run pays what the steady state
    `round_seconds` leaves out: crossover's first compute hides nothing and its last all-reduce
    is not hidden."""
    from parlab.serving import schedules

    if schedule not in ("sequential", "crossover"):
        raise ValueError(f"schedule={schedule!r}: run_seconds replays sequential or crossover")
    (thread,) = schedules.build(schedule, list(compute), steps)
    now, link_free, done = 0.0, 0.0, {}
    for job, hook, _ in thread:
        if hook == "compute":
            now += compute[job]
        elif hook == "start":
            link_free = done[job] = max(now, link_free) + comm[job]
        elif hook == "wait":
            now = max(now, done[job])
        else:
            now += update[job]
    return now


# ----------------------------------------------------------------------------- edge inference
def block_sides(cfg: GroupedConfig) -> list[int]:
    """Side of the feature map entering each block's mix: 8, 4, ... for 16×16 images."""
    return [IMAGE // STEM_POOL // 2 ** b for b in range(cfg.n_blocks)]


def edge_bytes(cfg: GroupedConfig, masks, world_size: int, batch: int) -> list[dict]:
    """Per rank: {phase: bytes sent} for one request of `batch` images, split over `world_size`."""
    per_rank = [dict() for _ in range(world_size)]
    for b, (mask, side) in enumerate(zip(masks, block_sides(cfg))):
        plan = send_channels(mask, world_size)
        for a in range(world_size):
            channels = sum(len(plan[a][d]) for d in range(world_size))
            per_rank[a][f"block {b}"] = channels * side * side * batch * FP32
    for a in range(1, world_size):
        per_rank[a]["head"] = batch * cfg.classes * FP32
    return per_rank


def dense_edge_bytes(cfg: GroupedConfig, world_size: int, batch: int, rank: int = 0) -> int:
    """Bytes rank `rank` sends per request when every feature is exchanged (closed form)."""
    n = world_size
    features = (n - 1) * (cfg.groups // n) * cfg.width * sum(s * s for s in block_sides(cfg))
    return (features + (cfg.classes if rank else 0)) * batch * FP32


def edge_rounds(cfg: GroupedConfig, world_size: int, masks=None) -> int:
    """Sequential message rounds on the critical path: N-1 per exchange, 1 for the head. With
    `masks`, a block whose mask sends nothing across devices skips its exchange (no round)."""
    if world_size == 1:
        return 0
    active = cfg.n_blocks if masks is None else sum(
        any(map(any, send_channels(mask, world_size))) for mask in masks)
    return active * (world_size - 1) + 1


def edge_critical_bytes(cfg: GroupedConfig, masks, world_size: int, batch: int) -> int:
    """Bytes on a request's critical path: each exchange (and the head) ends when its busiest
    sender's bytes have crossed, so Σ over phases of the largest device's bytes — at least the
    busiest device's total (`edge_comm_seconds` prices that total, as the search does)."""
    per_rank = edge_bytes(cfg, masks, world_size, batch)
    phases = dict.fromkeys(k for sent in per_rank for k in sent)
    return sum(max(sent.get(k, 0) for sent in per_rank) for k in phases)


def transfer_bytes(cfg: GroupedConfig, batch: int = 1) -> list[int]:
    """Bytes of one kept transfer — one channel of one group to one other device — before each
    block's mix: H_b·W_b floats per image."""
    return [side * side * batch * FP32 for side in block_sides(cfg)]


def edge_comm_seconds(cfg: GroupedConfig, masks, world_size: int, batch: int, link) -> float:
    """Seconds a request spends on the link: rounds·α + the busiest device's bytes / β (the
    communication part of `edge_latency`; what the transfer search prices)."""
    nbytes = max(sum(p.values()) for p in edge_bytes(cfg, masks, world_size, batch))
    return edge_latency(0.0, nbytes, edge_rounds(cfg, world_size, masks), world_size, link)


def edge_latency(compute_s: float, nbytes: float, rounds: int, world_size: int, link,
                 split_s: float | None = None) -> float:
    """Seconds of one request: compute/N + k·α + bytes/β (one device: compute alone); with
    `split_s`, the split's own compute per device P_N (on free links) replaces compute/N."""
    if world_size == 1:
        return compute_s
    alpha, beta = (0.0, math.inf) if link is None else (link.latency_s, link.bandwidth_Bps)
    share = compute_s / world_size if split_s is None else split_s
    return share + rounds * alpha + nbytes / beta


def break_even_bandwidth(compute_s: float, nbytes: float, rounds: int, world_size: int,
                         alpha: float, split_s: float | None = None) -> float:
    """β* (bytes/s) above which N devices answer faster than one; inf when they never do. The
    compute saved is P(1 - 1/N), or P - P_N with the split's own compute `split_s`."""
    saved = compute_s * (1 - 1 / world_size) if split_s is None else compute_s - split_s
    margin = saved - rounds * alpha
    return nbytes / margin if margin > 0 else math.inf
