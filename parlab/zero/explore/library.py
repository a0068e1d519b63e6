"""Chapter 02 as a library: `ZeRO` in a user's own training loop, as `ZeroRedundancyOptimizer`
and `fully_shard` are used.

`parlab.zero.api.ZeRO(model, make_optimizer, comm, stage)` shards the states of any `nn.Module`
under the user's optimizer; the loop calls `backward()`, then `zero.step()`. The demonstration
is chapter 01's (`parlab.models.user_loop`): a model with a tied embedding, a frozen
layer and a buffer, every rank seeded differently, checked against plain PyTorch in one process.
"""

from __future__ import annotations

import torch

from parlab.models.user_loop import ROWS, TiedNet, batch, compare, make_optimizer

WRAPPERS = tuple(f"zero{stage}" for stage in (1, 2, 3))  # ZeRO at stage 1, 2, 3


def worker(rank: int, world_size: int, wrapper: str, steps: int) -> dict:
    """The user's loop on this rank's rows, wrapped by ZeRO at `wrapper`'s stage."""
    from parlab.core.comm import Comm
    from parlab.zero.api import ZeRO

    if wrapper not in WRAPPERS:
        raise ValueError(f"wrapper={wrapper!r} must be one of {WRAPPERS}")
    rows = ROWS // world_size
    mine = slice(rank * rows, (rank + 1) * rows)
    model = TiedNet(seed=rank)  # every rank different: the wrapper makes them rank 0's
    zero = ZeRO(model, make_optimizer, Comm(), stage=int(wrapper[-1]))
    for step in range(steps):
        x, y = batch(step)
        # each rank's mean over its rows, scaled so the average over ranks is the global mean
        torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        zero.step()  # reduce-scatter, step this rank's 1/N of the states, gather
    return zero.full_state()


def demo(world_size: int = 2, steps: int = 3, wrappers=WRAPPERS) -> dict:
    """ZeRO's stages in the user's loop against one process (chapter 01's `compare`)."""
    return compare(worker, world_size, steps, wrappers)
