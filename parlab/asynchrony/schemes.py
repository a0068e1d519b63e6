"""Chapter 09's schemes: a parameter server on rank 0, workers on ranks 1..W.

- `ps-sync`: bulk synchronous (BSP): every worker computes its shard of step c's batch on
  version c; the server applies the mean once all W arrived. Equals `single` (exact).
- `ps-ssp`: stale synchronous parallel with staleness s (Ho et al., NeurIPS 2013): a worker may
  run up to s clocks ahead of the slowest; s = 0 is `ps-sync`, message for message.
- `ps-async`: asynchronous (Downpour SGD, Dean et al. 2012): every gradient (of a whole step's
  batch) is applied on arrival; jobs go to whichever worker is free. With one worker: `single`.

Options shared by all three: `delays` ("none": real arrival order; "seeded": the delay schedule's,
reproducible), `straggler` (the last worker's compute is that many times slower, by sleeping),
`jitter` (every computation up to (1 + jitter)× slower, seeded). The protocol:
`parlab.asynchrony.server`; the bookkeeping: `parlab.asynchrony.versions`.
"""

from parlab.asynchrony.cost import PSCost, schedule_of
from parlab.asynchrony.server import ParameterServer, Worker
from parlab.asynchrony.versions import Book
from parlab.core.checks import Choice, Float, Int
from parlab.engine.loop import build_model, make_optimizer, train
from parlab.engine.runner import register

OPTIONS = {"delays": Choice("none", ("none", "seeded")), "straggler": Float(1.0, min=1.0),
           "jitter": Float(0.0, min=0.0)}


def _validate(cfg):
    if cfg.world_size < 2:
        raise ValueError(f"world_size={cfg.world_size}: a parameter server needs rank 0 to serve and "
                         "at least one worker (world_size >= 2)")
    workers = cfg.world_size - 1
    if cfg.scheme != "ps-async" and cfg.batch_size % workers:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by the {workers} workers "
                         f"(world_size={cfg.world_size} - 1 server): each computes an equal shard")


def parameter_server(ctx, mode: str, staleness: int = 0):
    """Rank 0 serves, the others work; workers report each step's loss share by job."""
    cfg = ctx.cfg
    model = build_model(cfg)
    schedule = schedule_of(cfg)
    if ctx.rank == 0:
        book = Book(cfg.world_size - 1, cfg.steps, mode, staleness)
        seeded = schedule if cfg.options["delays"] == "seeded" else None
        return train(ctx, ParameterServer(ctx, model, make_optimizer(model.parameters(), cfg), book, seeded))
    worker = Worker(ctx, model, mode, schedule)
    result = train(ctx, worker)
    result.losses = worker.shares  # by job (step), not by loop iteration
    return result


@register("ps-sync", summary="parameter server, bulk synchronous: W shard gradients averaged per update",
          exact=True, options=dict(OPTIONS), validate=_validate, cost=PSCost("ssp"))
def ps_sync(ctx):
    return parameter_server(ctx, "ssp", 0)


@register("ps-ssp", summary="parameter server, stale synchronous: workers up to `staleness` clocks ahead",
          exact=False, options={**OPTIONS, "staleness": Int(1, min=0)}, validate=_validate,
          cost=PSCost("ssp"))
def ps_ssp(ctx):
    return parameter_server(ctx, "ssp", ctx.cfg.options["staleness"])


@register("ps-async", summary="parameter server, asynchronous (Downpour): each gradient applied on arrival",
          exact=False, options=dict(OPTIONS), validate=_validate, cost=PSCost("asp"))
def ps_async(ctx):
    return parameter_server(ctx, "asp")
