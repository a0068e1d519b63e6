"""Chapter 09's schemes: a parameter server on rank 0 (or `servers` ranks 0..k−1, the parameters
sharded over them: Li et al., OSDI 2014), workers on the other W = world_size − k ranks.

- `ps-sync`: bulk synchronous (BSP); equals `single` (exact).
- `ps-ssp`: stale synchronous parallel with staleness s (Ho et al., NeurIPS 2013); s = 0 is `ps-sync`.
- `ps-async`: asynchronous (Downpour SGD, Dean et al. 2012); with one worker, `single`.
- `ps-dualbatch`: `ps-async` with large- and small-batch workers and cyclic sequence lengths (Lu
  et al. 2025; `parlab.asynchrony.dualbatch`).

Options shared: `delays` ("none" or "seeded"), `straggler`, `jitter`, `servers`. The protocol:
`parlab.asynchrony.server`; the bookkeeping: `parlab.asynchrony.versions`. Each scheme and option
in full: docs/asynchrony.md, `parlab.asynchrony.schemes`.
"""

from parlab.asynchrony.cost import PSCost, async_bytes, async_jobs, schedule_of
from parlab.asynchrony.dualbatch import DualServer, DualWorker, batches, dual_schedule
from parlab.asynchrony.server import ParameterServer, Worker, assemble
from parlab.asynchrony.versions import Book
from parlab.core.checks import Choice, Float, Int
from parlab.engine.loop import build_model, train
from parlab.engine.prediction import Prediction, param_numels
from parlab.engine.runner import register

OPTIONS = {"delays": Choice("none", ("none", "seeded")), "straggler": Float(1.0, min=1.0, max=100.0),
           "jitter": Float(0.0, min=0.0, max=100.0), "servers": Int(1, min=1)}


def _validate(cfg, equal_shards: bool = False):
    servers = cfg.options["servers"]
    if cfg.world_size < 2:
        raise ValueError(f"world_size={cfg.world_size}: a parameter server needs rank 0 to serve and "
                         "at least one worker (world_size >= 2)")
    if servers >= cfg.world_size:
        raise ValueError(f"servers={servers} leaves no worker at world_size={cfg.world_size}: "
                         f"servers must be < world_size")
    numel = sum(param_numels(cfg))
    if servers > numel:
        raise ValueError(f"servers={servers} is more than the Ψ={numel} parameter elements to shard "
                         "(every server holds at least one)")
    workers = cfg.world_size - servers
    if equal_shards and cfg.batch_size % workers:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by the {workers} workers "
                         f"(world_size={cfg.world_size} - servers={servers}): each computes an equal shard")


def _validate_shards(cfg):
    """ps-sync and ps-ssp: every worker computes an equal shard of each update's batch."""
    _validate(cfg, equal_shards=True)


def parameter_server(ctx, mode: str, staleness: int = 0, server_class=ParameterServer,
                     worker_class=Worker, clock_schedule=None):
    """Ranks < servers serve, the others work; workers report each step's loss share by job."""
    cfg = ctx.cfg
    servers = cfg.options["servers"]
    model = build_model(cfg)
    schedule = schedule_of(cfg)
    if ctx.rank < servers:
        book = Book(cfg.world_size - servers, cfg.steps, mode, staleness)
        seeded = (clock_schedule or schedule) if cfg.options["delays"] == "seeded" else None
        return train(ctx, server_class(ctx, model, book, seeded, servers))
    worker = worker_class(ctx, model, mode, schedule, servers)
    result = train(ctx, worker)
    result.losses = worker.shares  # by job (step), not by loop iteration
    return result


@register("ps-sync", summary="parameter server, bulk synchronous: W shard gradients averaged per update",
          exact=True, options=dict(OPTIONS), validate=_validate_shards, cost=PSCost("ssp"),
          assemble=assemble)
def ps_sync(ctx):
    return parameter_server(ctx, "ssp", 0)


@register("ps-ssp", summary="parameter server, stale synchronous: workers up to `staleness` clocks ahead",
          exact=False, options={**OPTIONS, "staleness": Int(1, min=0)}, validate=_validate_shards,
          cost=PSCost("ssp"), assemble=assemble)
def ps_ssp(ctx):
    return parameter_server(ctx, "ssp", ctx.cfg.options["staleness"])


@register("ps-async", summary="parameter server, asynchronous (Downpour): each gradient applied on arrival",
          exact=False, options=dict(OPTIONS), validate=_validate, cost=PSCost("asp"),
          assemble=assemble)
def ps_async(ctx):
    return parameter_server(ctx, "asp")


def _validate_dual(cfg):
    _validate(cfg)
    o = cfg.options
    large, small = batches(cfg)
    workers = cfg.world_size - o["servers"]
    if small > large:
        raise ValueError(f"small_batch={small} is above large_batch={large}")
    if o["small_workers"] > workers:
        raise ValueError(f"small_workers={o['small_workers']} is more than the {workers} workers "
                         f"(world_size={cfg.world_size} - servers={o['servers']})")
    block = getattr(cfg.model_config, "block_size", 0)
    if o["cycles"] and not block:
        raise ValueError(f"cycles={o['cycles']} needs a model with a sequence length (gpt), not "
                         f"model={cfg.model!r}")
    if o["cycles"] > cfg.steps:
        raise ValueError(f"cycles={o['cycles']} is more than steps={cfg.steps}")
    if block and o["min_seq"] > block:
        raise ValueError(f"min_seq={o['min_seq']} is above the model's block_size={block}")


def _dual_cost(cfg) -> Prediction:
    """ps-async's closed form on the dual-batch run's own jobs: the seeded virtual clock, whose
    durations scale with each worker's batch, decides who computes how many (every message holds
    the parameters, whatever the batch or sequence length)."""
    numel, servers = sum(param_numels(cfg)), cfg.options["servers"]
    jobs, exact = async_jobs(cfg, dual_schedule(cfg))
    how = "the seeded schedule's jobs" if exact else "jobs split evenly (timing decides)"
    return Prediction(async_bytes(numel, jobs, cfg.steps, servers),
                      f"ps-async's S·M_0 + 16·W, (S + W)·M_i, J_w·Σ M_i + 16(k − 1); {how}")


@register("ps-dualbatch", summary="asynchronous parameter server, large- and small-batch workers "
          "(lr ∝ rows), sequence length growing in cycles", exact=False,
          options={**OPTIONS, "large_batch": Int(None, min=1, none=True),
                   "small_batch": Int(None, min=1, none=True), "small_workers": Int(1, min=0),
                   "cycles": Int(0, min=0), "min_seq": Int(8, min=1), "snapshot_every": Int(0, min=0)},
          validate=_validate_dual, assemble=assemble, cost=_dual_cost)
def ps_dualbatch(ctx):
    return parameter_server(ctx, "asp", server_class=DualServer, worker_class=DualWorker,
                            clock_schedule=dual_schedule(ctx.cfg))
