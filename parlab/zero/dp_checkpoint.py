"""Checkpoints of plain data parallelism (chapter 01's DDP schemes), in this chapter's format.

Every DDP rank holds the whole model and optimizer state, so a checkpoint needs only 1/N of it
from each: rank r writes, of each unit's flat vector (its parameters, and each AdamW state
tensor, concatenated and zero-padded to a multiple of N: `parlab.zero.shard.FlatLayout`), the
chunk ZeRO's rank r would hold. The step directory is then exactly a ZeRO checkpoint — rank files,
the manifest with every file's sha256, the run lock, kill-during-save safety, `keep` — and, like
every one, a `torch.distributed.checkpoint` that a plain process reads with `dcp.load`
(`parlab.zero.dcp_format`). Resuming (`resume=True`, or `resume_from=` a DCP checkpoint PyTorch
or parlab wrote) reads the full tensors from the DCP files into the model and the optimizer, at
any world size. Chapter 01 declares the options (`parlab.data_parallel.checkpointing`); this
module registers what they do there, so chapter 01 never imports this one.
"""


from __future__ import annotations

import torch

from parlab.core.rendezvous import under_torchrun
from parlab.data_parallel.checkpointing import register_checkpoints
from parlab.zero import checkpoint as ckpt_mod
from parlab.zero import checkpoint_integrity, dcp_format, run_lock
from parlab.zero.shard import FlatLayout, unit_modules


def validate(cfg) -> None:
    checkpoint_integrity.check_options(cfg)


def hold(cfg):
    """The save_dir's run lock, held by `parlab.run` around the launch (as ZeRO's)."""
    from contextlib import nullcontext

    directory = cfg.options.get("save_dir")
    return run_lock.held(directory) if directory is not None else nullcontext()


class _ShardView:
    """What `checkpoint.save` reads of an optimizer: `.state[shard]` ({key: this rank's chunk of
    the unit's flat state}) and `.param_groups`."""

    def __init__(self, optimizer, state: dict):
        self.state, self.param_groups = state, optimizer.param_groups


def _flat(tensors: list[torch.Tensor], padded: int) -> torch.Tensor:
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])  # (Ψ_u,)
    return torch.cat([flat, flat.new_zeros(padded - flat.numel())])  # (padded,)


def _shards(model, optimizer, world: int, rank: int):
    """(layouts, this rank's param chunk of each unit, the optimizer view of those chunks)."""
    layouts, shards, state = [], [], {}
    for name, _, params in unit_modules(model):
        layout = FlatLayout(name, tuple((n, tuple(p.shape)) for n, p in params))
        padded, (lo, hi) = layout.padded(world), layout.shard_range(world, rank)
        shard = _flat([p for _, p in params], padded)[lo:hi].clone()  # (padded/N,)
        per_param = [optimizer.state.get(p, {}) for _, p in params]
        keys = set.intersection(*(set(s) for s in per_param)) if per_param else set()
        own = {}
        for key in sorted(keys):
            first = per_param[0][key]
            own[key] = first.detach().clone() if first.dim() == 0 else \
                _flat([s[key] for s in per_param], padded)[lo:hi].clone()
        layouts.append(layout)
        shards.append(shard)
        state[shard] = own
    return layouts, shards, _ShardView(optimizer, state)


def _load(path, model, optimizer, rank: int):
    """Fill the model and the optimizer from the DCP checkpoint in `path`: (steps done, this
    rank's share of the resumed losses: all of them on rank 0, NaN where not recorded)."""
    params = dict(model.named_parameters())
    saved = dcp_format.TorchCheckpoint(path, {n: tuple(p.shape) for n, p in params.items()})
    full, state, steps, losses = saved.load()
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(full[name])
            if name in state:
                optimizer.state[p] = {k: v.clone() for k, v in state[name].items()}
    known = losses if losses is not None else [float("nan")] * steps
    return steps, [x if rank == 0 else 0.0 for x in known]


def attach(ctx, strategy):
    """Give a DDP `strategy` the checkpoint options: resume before the first step, save after
    every `save_every`-th; the strategy, unchanged without them."""
    o, comm = ctx.cfg.options, ctx.comm
    if o.get("save_dir") is None and o.get("resume_from") is None:
        return strategy
    model, optimizer = strategy.model, strategy.optimizers[0]
    locks = o["save_dir"] is not None and comm.rank == 0 and under_torchrun()
    if locks:
        run_lock.lock(o["save_dir"])
    path = o["resume_from"]
    if o["resume"]:  # the checkpoint the parent verified before spawn (`check_resume`)
        path = checkpoint_integrity.latest(o["save_dir"], deep=True)
    if path is not None:
        strategy.first_step, strategy.initial_losses = _load(path, model, optimizer, comm.rank)
    shares = list(strategy.initial_losses)
    forward_backward, after_step, finish = (strategy.forward_backward, strategy.after_step,
                                            strategy.finish)

    def counted_forward_backward(step, batch):
        share = forward_backward(step, batch)
        shares.append(share)
        return share

    def saving_after_step(step):
        after_step(step)
        if o["save_every"] and (step + 1) % o["save_every"] == 0:
            with ctx.span("checkpoint"):
                layouts, shards, view = _shards(model, optimizer, comm.size, comm.rank)
                ckpt_mod.save(o["save_dir"], comm, step + 1, layouts, shards, view, shares,
                              ctx.cfg.scheme, model)

    def unlocking_finish():
        finish()
        if locks:
            run_lock.unlock(o["save_dir"])

    strategy.forward_backward, strategy.after_step = counted_forward_backward, saving_after_step
    strategy.finish = unlocking_finish
    return strategy


# chapter 01's DDP schemes take their checkpoints from here by registration
register_checkpoints(validate, hold, attach)
