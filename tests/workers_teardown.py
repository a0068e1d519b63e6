"""Rank workers for tests/test_launch.py's teardown tests: a rank that leaves communication
behind when its function returns or raises (ranks import them by module name)."""

import torch
import torch.distributed as dist

LEFT: list = []  # what a worker leaves behind, alive until the process ends


def leave_async_work(rank, world_size, how, raise_after=False):
    """Issue collectives and leave them unwaited: `how` "gloo" (torch's async all-reduces),
    "ring" (a Comm's hand-written async all-reduce on its background thread) or "hooks" (a model
    whose gradient hooks hold the handles, in a reference cycle); then return, or raise."""
    from parlab.core.comm import Comm

    comm = Comm()
    t = torch.ones(1 << 16)
    if how == "gloo":
        LEFT.extend(dist.all_reduce(t.clone(), async_op=True) for _ in range(4))
    elif how == "ring":
        LEFT.extend(comm.all_reduce(t.clone(), algo="ring", async_op=True) for _ in range(4))
    elif how == "hooks":
        model = torch.nn.Linear(256, 256)
        model.handles = []
        for p in model.parameters():  # model → hook → closure → model: freed only by the gc
            p.register_post_accumulate_grad_hook(
                lambda p, model=model: model.handles.append(
                    comm.all_reduce(p.grad, algo="gloo", async_op=True)))
        model(torch.ones(4, 256)).sum().backward()
    if raise_after:
        raise RuntimeError(f"rank {rank} fails with communication in flight")
    return rank


def fail_with_queued_work(rank, world_size):
    """The last rank queues all-reduces its peers never join, then raises; the others wait."""
    import time

    if rank == world_size - 1:
        LEFT.extend(dist.all_reduce(torch.ones(1 << 10), async_op=True) for _ in range(3))
        raise RuntimeError(f"rank {rank} fails with {len(LEFT)} all-reduces queued")
    time.sleep(60)
    return rank
