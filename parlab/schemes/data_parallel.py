"""Data parallelism: every rank holds the whole model and trains on its slice of the batch.

After backward each rank holds the gradient of *its* mean loss; averaging the gradients over
ranks gives the gradient of the global mean loss, so one optimizer step on every rank keeps the
replicas identical and equal to the single-process run (Li et al., "PyTorch Distributed: Experiences
on Accelerating Data Parallel Training", VLDB 2020). `ddp-naive` does the simplest thing: after
backward, one all-reduce per parameter gradient, in order, nothing overlapped.
Per step each rank sends 2(N-1)/N·Ψ·4 bytes (Ψ parameters, fp32, ring all-reduce).
"""

from parlab.runner import register
from parlab.training import build_model, data_parallel_loop, make_optimizer

ALGOS = ("gloo", "ring", "tree", "naive")


def _validate(cfg):
    if cfg.batch_size % cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by "
                         f"world_size={cfg.world_size} (data-parallel ranks)")
    if cfg.options["algo"] not in ALGOS:
        raise ValueError(f"algo={cfg.options['algo']!r} must be one of {ALGOS}")


@register("ddp-naive", summary="all-reduce every gradient after backward", exact=True,
          options={"algo": "gloo"}, validate=_validate)
def ddp_naive(ctx):
    model = build_model(ctx.cfg)
    optimizer = make_optimizer(model.parameters(), ctx.cfg)
    algo = ctx.cfg.options["algo"]

    def sync_grads(step):
        with ctx.ledger.label(phase="grad-sync"):
            for p in model.parameters():
                ctx.comm.all_reduce(p.grad, op="avg", algo=algo)  # (param shape,) all ranks

    return data_parallel_loop(ctx, model, optimizer, ctx.rank, ctx.world_size, sync_grads)
