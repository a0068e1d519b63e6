"""Chapter 11's schemes: data parallelism on unequal devices.

- `hetero-dp`: rank r takes b_r rows, `shard="even"`, `"proportional"` or `"lp"` (HAP's linear
  program; Zhang et al., EuroSys 2024; `parlab.heterogeneous.shares`); gradients weighted by b_r/B,
  so it equals `single` for every sharding.
- `backup-workers`: the first N−b gradients of each step (Chen et al., "Revisiting Distributed
  Synchronous SGD", 2016; `parlab.heterogeneous.backup`); not exact, b = 0 equals `single`.
- `hetero-tp`: Megatron tensor + sequence parallelism with uneven shards by one ratio per rank
  (`parlab.heterogeneous.tp_shares`), uneven collectives padded or exact (`collective=`); exact.
All run under any `speeds=` and link or two-node topology. In full: docs/heterogeneous.md,
`parlab.heterogeneous.schemes`.
"""

from parlab.core.checks import Choice, Float, Int
from parlab.core.mesh import Mesh
from parlab.data_parallel.flat_all_reduce import all_reduce_flat
from parlab.engine.loop import Strategy, build_model, make_optimizer, train
from parlab.engine.runner import register
from parlab.heterogeneous import cost
from parlab.heterogeneous.backup import BackupWorkers
from parlab.heterogeneous.shares import SHARDINGS, even
from parlab.heterogeneous.tp_layers import uneven_linears
from parlab.heterogeneous.tp_shares import VARIANTS, problems
from parlab.heterogeneous.tp_shares import split as tp_split
from parlab.heterogeneous.weighted import WeightedShards
from parlab.models.gpt import gpt_on_mesh
from parlab.tensor_parallel.apply import apply_tp
from parlab.tensor_parallel.layers import assemble_state, replicated_parameters

# f of the step-time model in rows' worth: the default GPT's forward + backward + AdamW step at one
# row costs about as much as 1.5 more rows (measured on the 2-core machine, one thread per rank)
FIXED_ROWS = 1.5


def _validate(cfg):
    if cfg.batch_size < cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is smaller than world_size={cfg.world_size}: "
                         "some rank would have no rows even on equal devices")


def _validate_backup(cfg):
    if cfg.batch_size % cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by world_size={cfg.world_size}")
    if cfg.options["backups"] >= cfg.world_size:
        raise ValueError(f"backups={cfg.options['backups']} must be < world_size={cfg.world_size}: "
                         "at least one gradient must be used")


@register("hetero-dp", summary="data parallelism with shares by speed (even | proportional | HAP's LP), "
          "gradients weighted by share", exact=True,
          options={"shard": Choice("lp", SHARDINGS), "fixed_rows": Float(FIXED_ROWS, min=0, max=1e6)},
          validate=_validate, cost=cost.hetero_dp_prediction)
def hetero_dp(ctx):
    model = build_model(ctx.cfg)
    return train(ctx, WeightedShards(ctx, model, make_optimizer(model.parameters(), ctx.cfg),
                                     cost.rows_of(ctx.cfg)))


@register("backup-workers", summary="synchronous SGD on the first N−b gradients to arrive (Chen et al. "
          "2016)", exact=False, options={"backups": Int(1, min=0)}, validate=_validate_backup,
          cost=cost.backup_prediction)
def backup_workers(ctx):
    model = build_model(ctx.cfg)
    rows = even(ctx.cfg.batch_size, ctx.world_size)
    return train(ctx, BackupWorkers(ctx, model, make_optimizer(model.parameters(), ctx.cfg), rows,
                                    ctx.cfg.options["backups"]))


# ----------------------------------------------------------------------------- hetero-tp
# f of hetero-tp's step model, as a fraction of the step's sharded work W: what every rank does
# whatever its share (the replicated parameters' AdamW step, every kernel's and collective's fixed
# cost); 0.1 keeps the LP's shares near proportional while still trimming the slowest rank's
FIXED_TP = 0.1


def _validate_tp(cfg):
    if cfg.checkpoint:
        raise ValueError("checkpoint=True is not supported by hetero-tp: backward would recompute the "
                         "blocks' uneven collectives, which its closed forms (cost.tp_bytes) do not count")
    weights = cost.tp_ratios(cfg)
    found = problems(tp_split(cfg.model_config, weights), cost.speeds_of(cfg), cfg.options["shard"],
                     weights)
    if found:
        raise ValueError("; ".join(found) + ": every rank needs some work and at least one head, "
                         "MLP column and position (fewer or faster ranks, or shard='even')")


class UnevenTensorParallel(Strategy):
    """One replica cut unevenly over every rank (chapter 03's `apply_tp` with the split's shares):
    each rank holds its t_r positions; after backward the replicated parameters' gradients (each
    rank saw only its positions) are summed over the group in one flat bucket."""

    def __init__(self, ctx):
        cfg = ctx.cfg
        self.split = cost.tp_split(cfg)
        mesh = Mesh(ctx.comm, [("tp", ctx.world_size)])
        model = apply_tp(gpt_on_mesh(build_model(cfg)), mesh, shares=self.split,
                         collective=cfg.options["collective"], uneven=uneven_linears)
        self.mine = model.positions  # (t_r,) this rank's positions
        self.share = len(self.mine) / cfg.model_config.block_size
        super().__init__(ctx, model, make_optimizer(model.parameters(), cfg), holds_state=True)
        self.replicated = replicated_parameters(model)

    def batch(self, step: int):
        x, y = super().batch(step)  # (B, T)
        return x[:, self.mine], y[:, self.mine]  # (B, t_r): this rank's positions

    def loss(self, batch):
        """The mean over this rank's t_r tokens × t_r / T: their summed loss over all B·T tokens,
        so the ranks' losses add up to the mean."""
        return super().loss(batch) * self.share

    def sync(self, step: int) -> None:
        if self.ctx.world_size == 1:
            return
        with self.ctx.ledger.label(phase="sp-grad-sync"):
            all_reduce_flat(self.ctx.comm, self.replicated)  # (Σ numel,) over the ranks' positions

    def extras(self) -> dict:
        return {"tp_rank": self.ctx.rank, "split": self.split}


def _assemble_tp(outputs, cfg):
    shards = sorted((o for o in outputs if o.state is not None), key=lambda o: o.extras["tp_rank"])
    return assemble_state([o.state for o in shards])


@register("hetero-tp", shapes=True, summary="tensor + sequence parallelism with uneven shards by speed "
          "(even | proportional | HAP's LP), uneven all-gather / reduce-scatter padded or exact", exact=True,
          options={"shard": Choice("lp", SHARDINGS), "collective": Choice("exact", VARIANTS),
                   "fixed": Float(FIXED_TP, min=0, max=1e3)},
          validate=_validate_tp, assemble=_assemble_tp, models=("gpt",),
          cost=cost.hetero_tp_prediction)
def hetero_tp(ctx):
    return train(ctx, UnevenTensorParallel(ctx))
