"""One flat bucket: every gradient of a parameter list concatenated, all-reduced once, copied back.

The simplest bucketing (PyTorch DDP's, Li et al. VLDB 2020, §3.2.2, with one bucket): one
collective instead of one per tensor, so the α term is paid once. Chapter 01's `GradSync`
strategies (`parlab.data_parallel.sync_after_backward`, `overlap`) bucket by size and overlap with backward;
this is the blocking one-bucket form the other chapters use for the gradients they sync after
backward (tensor parallelism's replicated parameters, expert parallelism's dense and expert
weights, the planner's dp × cp group).
"""

from __future__ import annotations

import torch


def all_reduce_flat(comm, params, op: str = "sum", phase: str | None = None) -> None:
    """All-reduce the .grad of every parameter in `params` over `comm` as one bucket, in place."""
    params = list(params)
    flat = torch.cat([p.grad.reshape(-1) for p in params])  # (Σ numel,) one bucket
    comm.all_reduce(flat, op=op, phase=phase)  # (Σ numel,) reduced over the group
    for p, part in zip(params, flat.split([p.numel() for p in params])):
        p.grad.copy_(part.view_as(p))  # (param shape,)
