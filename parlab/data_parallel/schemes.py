"""Data parallelism: every rank holds the whole model and trains on its slice of the batch.

After backward each rank holds the gradient of *its* mean loss; averaging the gradients over
ranks gives the gradient of the global mean loss, so one optimizer step on every rank keeps the
replicas identical and equal to the single-process run (Li et al., "PyTorch Distributed:
Experiences on Accelerating Data Parallel Training", VLDB 2020). The variants differ only in
*when* and *in what pieces* the gradients move — the communication scheduling of DeAR (Zhang et
al., ICDCS 2023) and its baselines:

- `ddp-naive`: after backward, one all-reduce per parameter gradient, in order, nothing overlapped.
- `ddp-bucketed`: after backward, one all-reduce per flat bucket of `bucket_mb` (tensor fusion).
- `ddp-overlap`: WFBP — each bucket's async all-reduce starts from the backward hooks.
- `ddp-priority`: P3 / ByteScheduler — partitioned gradients sent front layers first, each layer
  updated just before the next forward needs it.
- `dear`: reduce-scatter in backward, all-gather overlapped with the next forward.

Per step each rank sends 2(N-1)/N·Ψ·4 bytes in every variant (Ψ parameters, fp32, ring); only
the number of messages and their timing change (closed forms: `parlab.data_parallel.cost`). `accum_steps`
splits each rank's rows into micro-batches and communicates only on the last one (`no_sync`).
"""

from parlab.data_parallel.bucketed import BucketedSync, NaiveSync
from parlab.data_parallel.dear import DeARSync
from parlab.data_parallel.overlap import OverlapSync
from parlab.data_parallel.priority import PrioritySync
from parlab.data_parallel.sync import train
from parlab.engine.loop import build_model
from parlab.engine.runner import register

ALGOS = ("gloo", "ring", "tree", "naive")
BUCKET_MB = 0.05  # MiB; the models here hold ~0.05-0.2 MiB, DDP's 25 MiB would be one bucket


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _validate(cfg):
    """Checks shared by every data-parallel variant; each names the offending value."""
    options = cfg.options
    accum = options.get("accum_steps", 1)
    if isinstance(accum, bool) or not isinstance(accum, int) or accum < 1:
        raise ValueError(f"accum_steps={accum!r} must be an int >= 1")
    if cfg.batch_size % (cfg.world_size * accum):
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by world_size="
                         f"{cfg.world_size} (data-parallel ranks) × accum_steps={accum} = "
                         f"{cfg.world_size * accum}")
    if "algo" in options and options["algo"] not in ALGOS:
        raise ValueError(f"algo={options['algo']!r} must be one of {ALGOS}")
    if "bucket_mb" in options and not (_is_number(options["bucket_mb"])
                                       and options["bucket_mb"] >= 0):
        raise ValueError(f"bucket_mb={options['bucket_mb']!r} must be a number >= 0 (MiB)")
    if "partition_kb" in options and not (_is_number(options["partition_kb"])
                                          and options["partition_kb"] * 1024 >= 4):
        raise ValueError(f"partition_kb={options['partition_kb']!r} must be a number of KiB "
                         "holding at least one float32")
    credit = options.get("credit", 1)
    if isinstance(credit, bool) or not isinstance(credit, int) or credit < 1:
        raise ValueError(f"credit={credit!r} must be an int >= 1")


def _run(ctx, make_sync):
    model = build_model(ctx.cfg)
    sync = make_sync(ctx, model)
    return train(ctx, model, sync, ctx.rank, ctx.world_size, ctx.cfg.options["accum_steps"])


@register("ddp-naive", summary="all-reduce every gradient after backward", exact=True,
          options={"algo": "gloo", "accum_steps": 1}, validate=_validate)
def ddp_naive(ctx):
    return _run(ctx, lambda ctx, model: NaiveSync(ctx, model, ctx.cfg.options["algo"]))


@register("ddp-bucketed", summary="flat buckets of bucket_mb, all-reduced after backward",
          exact=True, options={"bucket_mb": BUCKET_MB, "algo": "gloo", "accum_steps": 1},
          validate=_validate)
def ddp_bucketed(ctx):
    o = ctx.cfg.options
    return _run(ctx, lambda ctx, model: BucketedSync(ctx, model, o["bucket_mb"], o["algo"]))


@register("ddp-overlap", summary="WFBP: async bucket all-reduce from gradient hooks", exact=True,
          options={"bucket_mb": BUCKET_MB, "algo": "gloo", "accum_steps": 1}, validate=_validate)
def ddp_overlap(ctx):
    o = ctx.cfg.options
    return _run(ctx, lambda ctx, model: OverlapSync(ctx, model, o["bucket_mb"], o["algo"]))


@register("ddp-priority", summary="P3/ByteScheduler: partitions sent front layers first",
          exact=True, options={"bucket_mb": BUCKET_MB, "partition_kb": 32, "credit": 1,
                               "accum_steps": 1}, validate=_validate)
def ddp_priority(ctx):
    o = ctx.cfg.options
    return _run(ctx, lambda ctx, model: PrioritySync(ctx, model, o["bucket_mb"],
                                                     o["partition_kb"], o["credit"]))


@register("dear", summary="DeAR: reduce-scatter in backward, all-gather in the next forward",
          exact=True, options={"bucket_mb": BUCKET_MB, "accum_steps": 1}, validate=_validate)
def dear(ctx):
    return _run(ctx, lambda ctx, model: DeARSync(ctx, model, ctx.cfg.options["bucket_mb"]))
