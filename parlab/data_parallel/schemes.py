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
- `dear`: reduce-scatter in backward, all-gather overlapped with the next forward (`algo`: gloo
  or ring halves).

Per step each rank sends 2(N-1)/N·Ψ·4 bytes in every variant (Ψ parameters, fp32, ring; half
that in mixed precision, `precision="bf16-mixed"`: 16-bit gradients); only the number of messages
and their timing change (closed forms: `parlab.data_parallel.cost`). `accum_steps` splits each
rank's rows into micro-batches and communicates only on the last one (`no_sync`).
`reduce_dtype="fp32"` (ddp-naive, ddp-bucketed; PyTorch FSDP's `reduce_dtype`) reduces 16-bit
gradients as fp32 copies: fp32's bytes, one rounding of the sum instead of one per addition.
ddp-naive, ddp-bucketed and ddp-overlap checkpoint (`save_dir=`, `save_every=`, `resume=`,
`resume_from=`: `parlab.data_parallel.checkpointing`) in ZeRO's format, which PyTorch's
`torch.distributed.checkpoint` reads.
"""

from parlab.core.checks import Choice, Float, Int
from parlab.core.precision import PRECISIONS
from parlab.data_parallel import checkpointing
from parlab.data_parallel import cost as dp_cost
from parlab.data_parallel.apply import world_reducer
from parlab.data_parallel.layerwise import DeferredSync
from parlab.data_parallel.sync_after_backward import BucketedSync, NaiveSync
from parlab.data_parallel.sync_in_backward import OverlapSync
from parlab.engine.loop import build_model, train
from parlab.engine.runner import register

ALGOS = ("gloo", "ring", "tree", "naive")
BUCKET_MB = 0.05  # MiB; the models here hold ~0.05-0.2 MiB, DDP's 25 MiB would be one bucket


ACCUM = Int(1, min=1)  # micro-batches per rank per step (communication on the last only)
ALGO = Choice("gloo", ALGOS)
BUCKET = Float(BUCKET_MB, min=0, unit="MiB")
MIXED = tuple(PRECISIONS)  # precision= these schemes honour (tests/test_precision.py)
BF16 = ("fp32", "bf16-mixed")  # layer-wise deferred updates: no fp16 loss scaling per group
# mixed precision: reduce the gradients in the compute dtype (16 bits) or in fp32 (2× the bytes)
REDUCE = Choice("compute", ("compute", "fp32"))
# save_dir, save_every, resume, keep, allow_fresh_start, resume_from: checkpoints in ZeRO's format,
# readable by torch.distributed.checkpoint (`parlab.data_parallel.checkpointing`); the variants
# whose one optimizer steps every parameter (not ddp-priority's or dear's deferred updates)
SAVING = checkpointing.OPTIONS


def _validate(cfg):
    """What depends on several values (the options' types are checked by the registry)."""
    accum = cfg.options.get("accum_steps", 1)
    if cfg.batch_size % (cfg.world_size * accum):
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by world_size="
                         f"{cfg.world_size} (data-parallel ranks) × accum_steps={accum} = "
                         f"{cfg.world_size * accum}")


def _validate_saving(cfg):
    """ddp-naive, ddp-bucketed, ddp-overlap: `_validate`, then the checkpoint options."""
    _validate(cfg)
    checkpointing.validate(cfg)


def deferred(ctx, model, sync: str, **options) -> DeferredSync:
    """The loop's strategy around `sync`, a reducer that owns the update ("dear", "priority"),
    attached by `apply_dp` over the world with `options`."""
    return DeferredSync(ctx, model, lambda model, comm: world_reducer(model, comm, sync, **options))


def _run(ctx, make_sync):
    model = build_model(ctx.cfg)
    return train(ctx, checkpointing.attach(ctx, make_sync(ctx, model)))


@register("ddp-naive", shapes=True, summary="all-reduce every gradient after backward", exact=True,
          options={"algo": ALGO, "accum_steps": ACCUM, "reduce_dtype": REDUCE, **SAVING},
          validate=_validate_saving, hold=checkpointing.hold, cost=dp_cost.NAIVE, precisions=MIXED)
def ddp_naive(ctx):
    o = ctx.cfg.options
    return _run(ctx, lambda ctx, model: NaiveSync(ctx, model, o["algo"],
                                                  o["reduce_dtype"] == "fp32"))


@register("ddp-bucketed", shapes=True, summary="flat buckets of bucket_mb, all-reduced after backward",
          exact=True, options={"bucket_mb": BUCKET, "algo": ALGO, "accum_steps": ACCUM,
                               "reduce_dtype": REDUCE, **SAVING},
          validate=_validate_saving, hold=checkpointing.hold,
          cost=dp_cost.BUCKETED, precisions=MIXED)
def ddp_bucketed(ctx):
    o = ctx.cfg.options
    return _run(ctx, lambda ctx, model: BucketedSync(ctx, model, o["bucket_mb"], o["algo"],
                                                     o["reduce_dtype"] == "fp32"))


@register("ddp-overlap", shapes=True, summary="WFBP: async bucket all-reduce from gradient hooks", exact=True,
          options={"bucket_mb": BUCKET, "algo": ALGO, "accum_steps": ACCUM, **SAVING},
          validate=_validate_saving, hold=checkpointing.hold, cost=dp_cost.OVERLAP, precisions=MIXED)
def ddp_overlap(ctx):
    o = ctx.cfg.options
    return _run(ctx, lambda ctx, model: OverlapSync(ctx, model, o["bucket_mb"], o["algo"]))


@register("ddp-priority", shapes=True, summary="P3/ByteScheduler: partitions sent front layers first",
          exact=True, options={"bucket_mb": BUCKET,
                               "partition_kb": Float(32, min=4 / 1024, unit="KiB: >= one float32"),
                               "credit": Int(1, min=1), "accum_steps": ACCUM}, validate=_validate,
          cost=dp_cost.PRIORITY, precisions=BF16)
def ddp_priority(ctx):
    o = ctx.cfg.options
    return _run(ctx, lambda ctx, model: deferred(ctx, model, "priority", bucket_mb=o["bucket_mb"],
                                                 partition_kb=o["partition_kb"],
                                                 credit=o["credit"]))


@register("dear", shapes=True, summary="DeAR: reduce-scatter in backward, all-gather in the next forward",
          exact=True, options={"bucket_mb": BUCKET, "accum_steps": ACCUM,
                               "algo": Choice("gloo", ("gloo", "ring"))}, validate=_validate,
          cost=dp_cost.DEAR, precisions=BF16)
def dear(ctx):
    o = ctx.cfg.options
    return _run(ctx, lambda ctx, model: deferred(ctx, model, "dear", bucket_mb=o["bucket_mb"],
                                                 algo=o["algo"]))
