"""Chapter 11's schemes: data parallelism on unequal devices.

- `hetero-dp`: rank r takes b_r rows of the global batch, `shard="even"` (B/N each),
  `"proportional"` (∝ its speed) or `"lp"` (HAP's linear program; Zhang et al., EuroSys 2024;
  `parlab.heterogeneous.shares`); gradients weighted by b_r/B and summed, so it equals `single`
  for every sharding (`parlab.heterogeneous.weighted`).
- `backup-workers`: even shards, each step uses the first N−b gradients to arrive (Chen et al.,
  "Revisiting Distributed Synchronous SGD", 2016; `parlab.heterogeneous.backup`). Not exact: an
  unbiased gradient of a smaller batch; b = 0 equals `single`.

Both run under any `speeds=` (parlab.core.speeds) and any link or two-node topology
(parlab.core.topology).
"""

from parlab.core.checks import Choice, Float, Int
from parlab.engine.loop import build_model, make_optimizer, train
from parlab.engine.runner import register
from parlab.heterogeneous import cost
from parlab.heterogeneous.backup import BackupWorkers
from parlab.heterogeneous.shares import SHARDINGS, even
from parlab.heterogeneous.weighted import WeightedShards

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
          options={"shard": Choice("lp", SHARDINGS), "fixed_rows": Float(FIXED_ROWS, min=0)},
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
