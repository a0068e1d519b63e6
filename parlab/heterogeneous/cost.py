"""Chapter 11's closed forms: bytes each rank sends, and the step time of a sharding on unequal devices.

Bytes. `hetero-dp` all-reduces the flat gradient (Ψ fp32 elements) once per step with gloo's ring:
2(N−1)/N·Ψ elements out of every rank, whatever the shares (`parlab.core.cost.ring_all_reduce`);
uneven shares change the time, never the bytes. `backup-workers` (Chen et al., "Revisiting
Distributed Synchronous SGD", 2016) adds one all-gather of N arrival times (fp64) per step.

Time (seconds; `parlab.heterogeneous.shares` has the model): rank r at speed s_r with b_r rows
computes (f + b_r)·t/s_r, then the all-reduce takes c on the run's link (the group's slowest link
for a topology), so a step lasts max_r (f + b_r)·t/s_r + c. t = 6·Ψ·T / F: forward 2Ψ and backward
4Ψ FLOPs per token (Kaplan et al., "Scaling Laws for Neural Language Models", 2020) at F = 9 GFLOP/s,
the rate docs/measurements.md measured for the default GPT on one thread.
"""

from __future__ import annotations

from parlab.core import cost as core_cost
from parlab.core.link import Link
from parlab.core.topology import Topology
from parlab.engine.prediction import Prediction, param_numels
from parlab.heterogeneous import shares as shares_mod

CPU_FLOPS = 9e9  # FLOP/s of forward + backward of the default GPT here (docs/measurements.md)
TIME_BYTES = 8  # an arrival time travels as one float64


def speeds_of(cfg) -> list[float]:
    return list(cfg.speeds) if cfg.speeds is not None else [1.0] * cfg.world_size


def row_seconds(cfg) -> float:
    """t: one row's forward + backward at speed 1, 6·Ψ·T / F (T = 1 for the MLP)."""
    tokens = getattr(cfg.model_config, "block_size", 1)
    return 6 * sum(param_numels(cfg)) * tokens / CPU_FLOPS


def all_reduce_link(cfg) -> Link | None:
    """The link the all-reduce of the world group runs at: the run's Link, or a topology's slowest."""
    if isinstance(cfg.link, Topology):
        return cfg.link.link_for(range(cfg.world_size))
    return cfg.link


def comm_seconds(cfg) -> float:
    """c: the ring all-reduce of Ψ fp32 on the run's link, k·α + bytes/β (0 on the bare loopback)."""
    link = all_reduce_link(cfg)
    if link is None or cfg.world_size == 1:
        return 0.0
    sent, _, rounds = core_cost.ring_all_reduce(sum(param_numels(cfg)), cfg.world_size, 0)
    return link.cost(sent * core_cost.FP32_BYTES, rounds)


def rows_of(cfg) -> list[int]:
    """The rows per rank `hetero-dp` takes under this configuration's `shard` option."""
    o = cfg.options
    return shares_mod.shares(o.get("shard", "even"), cfg.batch_size, speeds_of(cfg),
                             o.get("fixed_rows", 0.0), comm_seconds(cfg) / row_seconds(cfg))


def step_time(rows: list[int], speeds, fixed_rows: float, row_s: float, comm_s: float = 0.0) -> float:
    """Predicted seconds per step: max_r (f + b_r)·t/s_r + c."""
    return max(shares_mod.rank_time(b, s, fixed_rows) for b, s in zip(rows, speeds)) * row_s + comm_s


def ideal_step_time(cfg) -> float:
    """T* of HAP's LP in seconds: no sharding of whole rows is faster under the model."""
    _, t_rows = shares_mod.solve_lp(cfg.batch_size, speeds_of(cfg), cfg.options.get("fixed_rows", 0.0))
    return t_rows * row_seconds(cfg) + comm_seconds(cfg)


def grad_sync_bytes(numel: int, world_size: int, rank: int) -> int:
    """Bytes rank `rank` sends in one ring all-reduce of `numel` fp32 elements."""
    return core_cost.ring_all_reduce(numel, world_size, rank)[0] * core_cost.FP32_BYTES


def arrival_bytes(world_size: int, rank: int) -> int:
    """Bytes rank `rank` sends in the all-gather of N arrival times (one fp64 each)."""
    return core_cost.ring_all_gather(world_size, world_size, rank)[0] * TIME_BYTES


def hetero_dp_prediction(cfg) -> Prediction:
    psi, n = sum(param_numels(cfg)), cfg.world_size
    return Prediction([cfg.steps * grad_sync_bytes(psi, n, r) for r in range(n)],
                      "steps × ring all-reduce of Ψ fp32: 2(N−1)/N·Ψ·4 bytes, whatever the shares")


def backup_prediction(cfg) -> Prediction:
    psi, n = sum(param_numels(cfg)), cfg.world_size
    return Prediction([cfg.steps * (grad_sync_bytes(psi, n, r) + arrival_bytes(n, r)) for r in range(n)],
                      "steps × (ring all-reduce of Ψ fp32 + all-gather of N fp64 arrival times)")
