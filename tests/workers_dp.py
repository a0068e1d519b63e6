"""Rank workers used only by tests/test_data_parallel.py."""

import torch

from parlab.core.comm import Comm
from parlab.data_parallel.schemes import deferred
from parlab.engine.loop import build_model, train
from parlab.engine.runner import make_config


def schedule_orders(rank, world_size, ctx_args):
    """Run DeAR and ddp-priority for 2 steps on this rank; return the orders they used."""
    import torch.distributed as dist

    from parlab.core.comm import Comm, Ledger
    from parlab.core.trace import Timeline
    from parlab.engine.runner import RankContext

    out = {}
    for scheme, make in (("dear", lambda c, m: deferred(c, m, "dear", bucket_mb=0.01)),
                         ("ddp-priority", lambda c, m: deferred(c, m, "priority", bucket_mb=0.01,
                                                                partition_kb=4, credit=1))):
        cfg = make_config(scheme, world_size=dist.get_world_size(), steps=2, **ctx_args)
        ledger, timeline = Ledger(dist.get_rank()), Timeline(dist.get_rank())
        ctx = RankContext(dist.get_rank(), dist.get_world_size(), cfg,
                          Comm(None, ledger=ledger, timeline=timeline), ledger, timeline)
        model = build_model(cfg)
        sync = make(ctx, model)
        train(ctx, sync)
        out[scheme] = {"forward_order": sync.forward_order,
                       "applied_order": sync.layerwise.applied_order,
                       "launch_order": getattr(sync.reducer, "launch_order", None),
                       "ops": [(r["op"], r["numel"]) for r in ledger.records if r["step"] == 0]}
    return out


class TiedNet(torch.nn.Module):
    """A user's model the way real ones are: a frozen layer, an embedding tied to the output head,
    and a branch used only on even steps."""

    def __init__(self, vocab: int = 16, width: int = 8):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Embedding(vocab, width)
        self.frozen = torch.nn.Linear(width, width)
        self.body = torch.nn.Linear(width, width)
        self.branch = torch.nn.Linear(width, width)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        self.frozen.requires_grad_(False)

    def forward(self, idx, use_branch: bool):
        h = torch.tanh(self.frozen(self.embed(idx)))  # (B, width)
        h = torch.tanh(self.body(h))  # (B, width)
        if use_branch:
            h = h + self.branch(h)  # (B, width)
        return h @ self.embed.weight.t()  # (B, vocab): the tied head


def tied_batch(step: int, rows: int = 12, vocab: int = 16):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randint(vocab, (rows,), generator=g), torch.randint(vocab, (rows,), generator=g)


def user_optimizer(model):
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1,
                           momentum=0.9, weight_decay=0.01)


def train_tied_single(steps: int) -> dict:
    """Plain PyTorch, one process, the whole batch: the reference."""
    torch.manual_seed(0)
    model = TiedNet()
    optimizer = user_optimizer(model)
    for step in range(steps):
        x, y = tied_batch(step)
        torch.nn.functional.cross_entropy(model(x, step % 2 == 0), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def train_tied_library(rank, world_size, sync: str, steps: int, find_unused: bool = True):
    """The same training with parlab's DataParallel on this rank's rows."""
    from parlab.data_parallel.api import DataParallel

    model = TiedNet()
    optimizer = user_optimizer(model)
    ddp = DataParallel(model, optimizer, Comm(), sync=sync, bucket_mb=0.0005,
                       find_unused_parameters=find_unused)
    rows = 12 // world_size
    for step in range(steps):
        x, y = tied_batch(step)
        mine = slice(rank * rows, (rank + 1) * rows)
        torch.nn.functional.cross_entropy(model(x[mine], step % 2 == 0), y[mine]).backward()
        ddp.synchronize()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {"state": {n: p.detach().clone() for n, p in model.named_parameters()},
            "ledger": ddp.comm.ledger.records,
            "numels": [p.numel() for p in ddp.params]}


def train_tied_zero(rank, world_size, stage: int, steps: int):
    """ZeroEngine on the user's model (frozen layer, tied embedding; the branch used every step)
    with the user's optimizer over this rank's flat shards."""
    from parlab.zero.zero_engine import ZeroEngine

    model = TiedNet()
    engine = ZeroEngine(model, Comm(), stage)
    optimizer = torch.optim.SGD(engine.shards, lr=0.1, momentum=0.9, weight_decay=0.01)
    rows = 12 // world_size
    for step in range(steps):
        x, y = tied_batch(step)
        mine = slice(rank * rows, (rank + 1) * rows)
        engine.start_step()
        torch.nn.functional.cross_entropy(model(x[mine], True), y[mine]).backward()
        engine.end_backward()
        optimizer.step()
        engine.after_step()
        engine.zero_grad()
    return {"shards": {u.name: u.shard.detach().clone() for u in engine.units},
            "layouts": [u.layout.to_meta() for u in engine.units],
            "frozen": model.frozen.weight.detach().clone()}


def train_tied_single_all_used(steps: int) -> dict:
    model = TiedNet()
    optimizer = user_optimizer(model)
    for step in range(steps):
        x, y = tied_batch(step)
        torch.nn.functional.cross_entropy(model(x, True), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {n: p.detach().clone() for n, p in model.named_parameters()}
