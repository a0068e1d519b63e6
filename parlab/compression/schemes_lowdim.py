"""`lowdim`: data parallelism of Kwon et al.'s compressed deep linear network (AISTATS 2024,
arXiv 2311.05061; `parlab.compression.lowdim`) — compress the model, and the all-reduce shrinks.

Every rank builds the same network from the seed and takes its rows of the observed entries;
each step is full-batch gradient descent, averaged by one flat all-reduce of 2dr̂ + (L−2)r̂²
floats (`cost.LOWDIM`), or with `powersgd_rank` by the chapter's PowerSGD. Options `d`, `depth`,
`target_rank`, `width`, `observed`; `batch_size` is not read. Registered `exact=False` (`single`
cannot train this network); it equals `lowdim.fit` within 1e-4 at world sizes 1, 2, 4
(tests/test_compression_lowdim.py). In full: docs/compression.md, `parlab.compression.schemes_lowdim`.
"""

from __future__ import annotations

from parlab.compression import cost
from parlab.compression.lowdim import (
    build_network,
    completion_task,
    make_dln_optimizer,
    observed_count,
    outer_rate,
)
from parlab.compression.powersgd import PowerSGDSync
from parlab.core.checks import Choice, Float, Int
from parlab.data_parallel.flat_all_reduce import all_reduce_flat
from parlab.engine.loop import Strategy, train
from parlab.engine.runner import register
from parlab.models import data

OPTIONS = {
    "network": Choice("compressed", ("compressed", "original")),
    "d": Int(32, min=2),  # the d×d matrix, and the original network's width
    "depth": Int(3, min=2),  # L
    "target_rank": Int(2, min=1),  # r, the target's rank
    "width": Int(None, min=1, none=True),  # r̂ of the compressed network; None: 2r (the paper's)
    "observed": Float(0.5, min=0, strict=True, max=1),  # p: the fraction of entries observed
    "init_scale": Float(0.1, min=0, strict=True),  # ε
    "alpha": Float(4.0, min=0, strict=True),  # the compressed network's outer-factor lr ratio
    "powersgd_rank": Int(None, min=1, none=True),  # None: all-reduce whole; r: PowerSGD rank r
}


def _validate(cfg):
    o, bad = cfg.options, []
    if o["target_rank"] > o["d"]:
        bad.append(f"target_rank={o['target_rank']} must be <= d={o['d']}")
    if o["width"] is not None and o["network"] == "original":
        bad.append(f"width={o['width']} applies to network='compressed' only (the original is d wide)")
    if o["width"] is not None and o["width"] > o["d"]:
        bad.append(f"width={o['width']} must be <= d={o['d']}")
    if o["width"] is None and 2 * o["target_rank"] > o["d"] and o["network"] == "compressed":
        bad.append(f"width=None means 2·target_rank={2 * o['target_rank']}, above d={o['d']}")
    m = observed_count(o["d"], o["observed"])
    if m < cfg.world_size or m % cfg.world_size:
        bad.append(f"observed={o['observed']} gives m={m} entries of the {o['d']}×{o['d']} matrix, "
                   f"not divisible among world_size={cfg.world_size} ranks")
    if bad:
        raise ValueError("; ".join(bad))


class ObservedEntries:
    """This rank's rows of the observed entries: (index (m/N, 2), values (m/N,)), every step."""

    def batch(self, step: int):
        return data.shard((self.task.index, self.task.values), self.shard, self.shards)


class LowDimSync(ObservedEntries, Strategy):
    """Full-batch GD on this rank's entries; one flat all-reduce (average) of every gradient."""

    def __init__(self, ctx, model, task, optimizer):
        self.task = task
        super().__init__(ctx, model, optimizer, shard=ctx.rank, shards=ctx.world_size)

    def sync(self, step: int) -> None:
        with self.ctx.ledger.label(phase="grad-sync"):
            all_reduce_flat(self.ctx.comm, self.model.parameters(), op="avg")  # (Ψ,) one bucket


class LowDimPowerSGD(ObservedEntries, PowerSGDSync):
    """The same network and entries, its gradients sent as PowerSGD's rank-r factors."""

    def __init__(self, ctx, model, task, optimizer, rank: int):
        self.task = task
        super().__init__(ctx, model, rank, error_feedback=True, warm_start=True)
        self.set_optimizers([optimizer])  # the discrepant learning rate's groups
        self.optimizer = optimizer


def network_of(cfg):
    """(task, model, optimizer) of a `lowdim` configuration, identical on every rank."""
    o = cfg.options
    task = completion_task(o["d"], o["target_rank"], o["observed"], cfg.seed)
    width = cost.lowdim_width(o["d"], o["network"], o["width"], o["target_rank"])
    model = build_network(task, o["network"], width, o["depth"], o["init_scale"], cfg.seed)
    optimizer = make_dln_optimizer(model, cfg.optimizer, cfg.lr, outer_rate(o["network"], o["alpha"]))
    return task, model, optimizer


@register("lowdim", summary="Kwon et al. 2024: DP deep matrix completion on a rank-r̂ compressed "
          "deep linear network: one all-reduce of 2dr̂ + (L−2)r̂² floats", exact=False,
          options=OPTIONS, validate=_validate, cost=cost.LOWDIM)
def lowdim(ctx):
    task, model, optimizer = network_of(ctx.cfg)
    rank = ctx.cfg.options["powersgd_rank"]
    if rank is None:
        return train(ctx, LowDimSync(ctx, model, task, optimizer))
    return train(ctx, LowDimPowerSGD(ctx, model, task, optimizer, rank))
