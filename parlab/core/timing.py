"""Timing one collective on the real loopback: what the α-β calibrations fit (chapter 00's model).

`fit_alpha_beta` (`parlab.core.cost`) and the planner's group profile
(`parlab.planner.profile`) both need the wall time of gloo's own all-reduce at a few sizes,
with every rank starting together. This is that measurement, once. It reads the raw clock on
purpose: it calibrates the machine, it is not a paced result (docs/measurements.md).
"""

from __future__ import annotations

import time

import torch


def all_reduce_seconds(comm, numel: int, repeats: int) -> list[float]:
    """`repeats` wall times of one all-reduce of `numel` floats over `comm`, each started after a
    barrier so every rank enters together; one warm-up call before them is not returned."""
    tensor = torch.ones(numel)  # (numel,)
    times = []
    for _ in range(repeats + 1):
        comm.barrier()
        t0 = time.perf_counter()
        comm.all_reduce(tensor)  # (numel,) summed over the group
        times.append(time.perf_counter() - t0)
    return times[1:]
