"""Chapters 01 and 02 as a library: `DataParallel` and `ZeRO` in a user's own training loop.

PyTorch's `DistributedDataParallel` wraps any `nn.Module` and leaves the loop, the optimizer and
the data to the user; so do `parlab.data_parallel.api.DataParallel` (the gradient syncs of
chapter 01) and `parlab.zero.api.ZeRO` (the stages of chapter 02). This module is the notebooks'
demonstration: a user's model as real ones are (an embedding tied to the head, a frozen layer, a
buffer), every rank seeded differently (the wrappers broadcast rank 0's weights at construction),
each rank on its rows of the batch, checked against plain PyTorch on the whole batch in one
process. The worker lives here, not in the notebook, because spawned ranks import it by name.
"""

from __future__ import annotations

import torch

ROWS, VOCAB, WIDTH = 12, 16, 8


class TiedNet(torch.nn.Module):
    """An embedding tied to the output head, a frozen layer, two residual blocks, a buffer."""

    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.frozen = torch.nn.Linear(WIDTH, WIDTH)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(2))
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied: one Parameter, two modules
        self.register_buffer("scale", torch.tensor(1.0 + seed))
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        self.frozen.requires_grad_(False)

    def forward(self, idx):
        h = torch.tanh(self.frozen(self.embed(idx)))  # (B, width)
        for block in self.blocks:
            h = h + block(h)  # (B, width)
        return self.head(h * self.scale)  # (B, vocab)


def batch(step: int):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randint(VOCAB, (ROWS,), generator=g), torch.randint(VOCAB, (ROWS,), generator=g)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)


def _trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def single_process_state(steps: int) -> dict:
    """Plain PyTorch in one process on the whole batch, from rank 0's initial weights."""
    model = TiedNet(0)
    optimizer = make_optimizer(_trainable(model))
    for step in range(steps):
        x, y = batch(step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def worker(rank: int, world_size: int, wrapper: str, steps: int) -> dict:
    """The user's loop on this rank's rows, with `wrapper` "ddp" or "zero1" / "zero2" / "zero3"."""
    from parlab.core.comm import Comm
    from parlab.data_parallel.api import DataParallel
    from parlab.zero.api import ZeRO

    rows = ROWS // world_size
    mine = slice(rank * rows, (rank + 1) * rows)
    model = TiedNet(seed=rank)  # every rank different: the wrapper makes them rank 0's
    if wrapper == "ddp":
        optimizer = make_optimizer(_trainable(model))
        ddp = DataParallel(model, optimizer, Comm(), sync="bucketed")
    else:
        zero = ZeRO(model, make_optimizer, Comm(), stage=int(wrapper[-1]))
    for step in range(steps):
        x, y = batch(step)
        # each rank's mean over its rows, scaled so the average over ranks is the global mean
        torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        if wrapper == "ddp":
            ddp.synchronize()  # gradients averaged over the ranks
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            zero.step()  # reduce-scatter, step this rank's 1/N of the states, gather
    if wrapper == "ddp":
        return {n: p.detach().clone() for n, p in model.named_parameters()}
    return zero.full_state()


def demo(world_size: int = 2, steps: int = 3, wrappers=("ddp", "zero1", "zero2", "zero3")) -> dict:
    """Each wrapper on `world_size` ranks against `single`; prints the largest difference and
    `match: True/False` (1e-4) per wrapper; returns {wrapper: match}."""
    from parlab.core.launch import launch

    if ROWS % world_size:
        raise ValueError(f"world_size={world_size} must divide the batch of {ROWS} rows")
    reference = single_process_state(steps)
    matches = {}
    for wrapper in wrappers:
        state = launch(worker, world_size, wrapper, steps)[0]
        diff = max((state[n] - reference[n]).abs().max().item() for n in reference)
        matches[wrapper] = diff <= 1e-4
        print(f"{wrapper:6s} on {world_size} rank(s), your loop and optimizer: max |Δparam| vs one "
              f"process {diff:.1e}, match: {matches[wrapper]}")
    return matches
