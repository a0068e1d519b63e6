"""Dual-batch workers and cyclic progressive learning on the asynchronous parameter server.

Lu, Hong, Liu, Wu, "Hybrid Dual-Batch and Cyclic Progressive Learning for Efficient Distributed
Training" (2025, arXiv 2509.26092): most workers compute `large_batch` rows per gradient, the last
`small_workers` compute `small_batch` rows, asynchronously; a gradient of b rows is applied with
the learning rate scaled by b / large_batch (Goyal et al., "Accurate, Large Minibatch SGD",
2017); the input size (here the GPT's sequence length, `min_seq` up to the block size) grows
within each of `cycles` cycles. Tested: every job is computed and applied once, logged with its
version and batch size; with equal batches and no cycles it is `ps-async`, update for update.
The seeded clock's per-batch time and the rest: docs/asynchrony.md, `parlab.asynchrony.dualbatch`.
"""

from __future__ import annotations

import math

from parlab.asynchrony.delays import DelaySchedule
from parlab.asynchrony.server import ParameterServer, Worker, flat_params
from parlab.models import data


def batches(cfg) -> tuple[int, int]:
    """(large_batch, small_batch): None means batch_size, and half of large_batch."""
    o = cfg.options
    large = o["large_batch"] if o["large_batch"] is not None else cfg.batch_size
    return large, (o["small_batch"] if o["small_batch"] is not None else max(large // 2, 1))


def batch_of(cfg, worker: int) -> int:
    """Rows per gradient of worker id `worker` (1..W): the last `small_workers` are small."""
    o = cfg.options
    workers = cfg.world_size - o["servers"]
    large, small = batches(cfg)
    return small if worker > workers - o["small_workers"] else large


def seq_len_at(job: int, steps: int, cycles: int, min_seq: int, max_seq: int) -> int:
    """Cyclic progressive learning: within each of `cycles` cycles of ⌈steps / cycles⌉ jobs the
    sequence length grows linearly from min_seq to max_seq; cycles = 0: always max_seq."""
    if cycles == 0 or max_seq == 0:
        return max_seq
    length = math.ceil(steps / cycles)
    position = (job % length) / max(length - 1, 1)
    return min_seq + round((max_seq - min_seq) * position)


def dual_schedule(cfg) -> DelaySchedule:
    """The seeded virtual clock's schedule: durations scaled by each worker's batch ratio."""
    o = cfg.options
    workers = cfg.world_size - o["servers"]
    ratios = tuple(batch_of(cfg, w) / batches(cfg)[0] for w in range(1, workers + 1))
    return DelaySchedule(workers, cfg.seed, o["straggler"], o["jitter"], ratios)


class DualWorker(Worker):
    """An asp worker whose job is `batch_of(worker)` rows of step `job`'s stream, at the cycle's
    sequence length."""

    def job_batch(self, job: int):
        cfg = self.ctx.cfg
        o = cfg.options
        block = getattr(cfg.model_config, "block_size", 0)
        seq = seq_len_at(job, cfg.steps, o["cycles"], o["min_seq"], block)
        return data.global_batch(cfg.model, job, batch_of(cfg, self.id), cfg.seed, seq)  # (b, T_j)


class DualServer(ParameterServer):
    """Scales each update's learning rate by its rows / large_batch; logs batch sizes and keeps a
    copy of its shard every `snapshot_every` updates (for the held-out loss over time)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        o = self.ctx.cfg.options
        self.every = o["snapshot_every"]
        self.update_batches: list[int] = []
        self.snapshots: list[tuple[int, float, object]] = []  # (updates, seconds, (Ψ_i,) shard)

    def lr_scale(self, by_worker: dict) -> float:
        (worker,) = by_worker  # asp: one gradient per update
        rows = batch_of(self.ctx.cfg, worker)
        self.update_batches.append(rows)
        return rows / batches(self.ctx.cfg)[0]

    def apply(self, job: int) -> None:
        if self.every and not self.snapshots:
            self.snapshots.append((0, 0.0, flat_params(self.model)))  # (Ψ_i,) the initial shard
        super().apply(job)
        done = len(self.update_times)
        if self.every and (done % self.every == 0 or done == self.ctx.cfg.steps):
            self.snapshots.append((done, self.update_times[-1], flat_params(self.model)))  # (Ψ_i,)

    def extras(self) -> dict:
        return {**super().extras(), "update_batches": self.update_batches, "snapshots": self.snapshots}
