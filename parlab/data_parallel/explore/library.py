"""Chapter 01 as a library: `DataParallel` in a user's own training loop.

PyTorch's `DistributedDataParallel` wraps any `nn.Module` and leaves the loop, the optimizer and the
data to the user; so does `parlab.data_parallel.api.DataParallel` (the gradient syncs of chapter 01;
chapter 02's `ZeRO` in `parlab.zero.explore.library`, on the same model). This module is the
notebooks' demonstration: a user's model as real ones are (an embedding tied to the head, a frozen
layer, a buffer), every rank seeded differently (the wrappers broadcast rank 0's weights at
construction), each rank on its rows of the batch, checked against plain PyTorch on the whole batch
in one process. The worker lives here, not in the notebook, because spawned ranks import it by name.
"""

from __future__ import annotations

import torch

from parlab.models.user_loop import ROWS, TiedNet, batch, compare, make_optimizer, trainable


def worker(rank: int, world_size: int, wrapper: str, steps: int) -> dict:
    """The user's loop on this rank's rows, with chapter 01's `DataParallel` (`wrapper` "ddp")."""
    from parlab.core.comm import Comm
    from parlab.data_parallel.api import DataParallel

    if wrapper != "ddp":
        raise ValueError(f"wrapper={wrapper!r}: chapter 01 wraps with 'ddp' (ZeRO's stages: "
                         "parlab.zero.explore.library)")
    rows = ROWS // world_size
    mine = slice(rank * rows, (rank + 1) * rows)
    model = TiedNet(seed=rank)  # every rank different: the wrapper makes them rank 0's
    optimizer = make_optimizer(trainable(model))
    ddp = DataParallel(model, optimizer, Comm(), sync="bucketed")
    for step in range(steps):
        x, y = batch(step)
        # each rank's mean over its rows, scaled so the average over ranks is the global mean
        torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        ddp.synchronize()  # gradients averaged over the ranks
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def demo(world_size: int = 2, steps: int = 3, wrappers=("ddp",)) -> dict:
    """Chapter 01's wrapper in the user's loop against one process (`compare`)."""
    return compare(worker, world_size, steps, wrappers)
