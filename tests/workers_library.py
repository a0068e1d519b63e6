"""Rank workers for tests/test_library.py: parlab's building blocks in a user's own training loop
(ranks import them by module name: spawned ranks cannot see functions defined inside a test)."""

import torch

from parlab.models.user_loop import (  # noqa: F401  (the chapters' demo)
    ROWS,
    batch,
    train_whole_batch,  # a tied head, a frozen layer
)
from parlab.models.user_loop import TiedNet as BlockNet


def adamw(params):
    return torch.optim.AdamW(params, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def single(steps: int) -> dict:
    """The reference: plain PyTorch, one process, the whole batch, rank 0's initial weights."""
    out = {}
    for name, make in (("sgd", sgd), ("adamw", adamw)):
        model = BlockNet(0)
        out[name] = train_whole_batch(model, make(trainable(model)), steps)
    return out


def library(rank, world_size, steps: int) -> dict:
    """DataParallel (SGD) and ZeRO-1/2/3 (AdamW) on this rank's rows; every rank seeds its model
    differently: the broadcast at construction makes them rank 0's."""
    from parlab.core.comm import Comm
    from parlab.data_parallel.api import DataParallel
    from parlab.zero.api import ZeRO

    rows = ROWS // world_size
    mine = slice(rank * rows, (rank + 1) * rows)
    out = {}

    model = BlockNet(seed=rank)
    optimizer = sgd(trainable(model))
    ddp = DataParallel(model, optimizer, Comm(), sync="bucketed", bucket_mb=0.0005)
    for step in range(steps):
        x, y = batch(step)
        torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        ddp.synchronize()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    out["ddp"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    out["scale"] = float(model.scale)

    for stage in (1, 2, 3):
        model = BlockNet(seed=rank)
        # the user's optimizer, built over the model as usual: ZeRO rebuilds it over its shards
        zero = ZeRO(model, adamw(trainable(model)), Comm(), stage=stage)
        for step in range(steps):
            x, y = batch(step)
            torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
            zero.step()
        out[f"zero{stage}"] = zero.full_state()
        out[f"zero{stage}_optimizer_numel"] = sum(
            t.numel() for s in zero.optimizer.state.values() for t in s.values() if t.dim())
    return out


def parameter_list(rank, world_size, steps: int, stage: int) -> dict:
    """ZeRO over a parameter list (stages 1, 2) with an optimizer factory."""
    from parlab.zero.api import ZeRO

    model = BlockNet(0)
    zero = ZeRO(trainable(model), sgd, stage=stage)  # comm: the default group
    rows = ROWS // world_size
    mine = slice(rank * rows, (rank + 1) * rows)
    for step in range(steps):
        x, y = batch(step)
        torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        zero.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def without_optimizer(rank, world_size) -> list:
    """DataParallel(model) with no optimizer and no comm: the user steps by hand."""
    from parlab.data_parallel.api import DataParallel

    model = BlockNet(0)
    ddp = DataParallel(model, sync="naive")
    x, y = batch(0)
    torch.nn.functional.cross_entropy(model(x[rank::world_size]), y[rank::world_size]).backward()
    ddp.synchronize()
    before = model.embed.weight.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.1).step()  # the user's own, after synchronize()
    return [model.embed.weight.grad.clone(), ddp.optimizer, before, model.embed.weight.detach().clone()]


def verify_differing(rank, world_size, init: str) -> bool:
    """init='verify' on models seeded per rank (rank 0 and 1 differ): every rank raises."""
    from parlab.core.comm import Comm
    from parlab.data_parallel.api import DataParallel
    from parlab.zero.api import ZeRO

    model = BlockNet(seed=0 if rank != 1 else 1)
    if init == "zero":
        ZeRO(model, adamw, Comm(), stage=3, init="verify")
    else:
        DataParallel(model, None, Comm(), init="verify")
    return True
