"""`torch-ddp`: PyTorch's own DistributedDataParallel on the same model, data and optimizer.

DDP's reducer (Li et al., "PyTorch Distributed", VLDB 2020) buckets gradients in reverse order
(`bucket_cap_mb`; the first bucket is capped at 1 MiB), launches each bucket's all-reduce from
autograd hooks and waits for all of them at the end of backward — what `ddp-overlap` rebuilds by
hand. Gradient accumulation uses `no_sync()` on every micro-step but the last.

`comm="parlab"` (default) installs a DDP communication hook that all-reduces each of DDP's
buckets through `parlab.core.comm.Comm`: the bytes are in the ledger and an emulated `link` slows DDP
exactly as it slows our variants. DDP blocks on its buckets inside `backward()` (the reducer's
final callback), so the timeline shows backward as compute up to the last gradient hook and the
rest as the exposed wait. `comm="torch"` leaves DDP's built-in gloo all-reduce in place —
PyTorch's implementation untouched, but its bytes are NOT in the ledger (nominally 2(N-1)/N·Ψ·4
per step, as ours) and an emulated link does not delay it: use it on loopback.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.nn.parallel import DistributedDataParallel

from parlab.core.comm import Comm
from parlab.core.memory import ActivationMeter, model_memory
from parlab.core.trace import Timeline
from parlab.data_parallel.schemes import BUCKET_MB, _validate
from parlab.data_parallel.sync import micro_batches
from parlab.engine.loop import build_model, make_optimizer, state_of, step_batch
from parlab.engine.runner import register

COMMS = ("parlab", "torch")


class LossModule(torch.nn.Module):
    """DDP only hooks backward through its own forward, so the loss must be computed inside it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return self.model.loss(x, y)


def parlab_comm_hook(comm):
    """A DDP comm hook: average DDP's flat bucket with `comm` (recorded, link-emulated).

    DDP wants a torch Future; a helper thread waits on our Handle and completes it, so the
    autograd thread goes on computing while the bucket is in flight.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parlab-ddp-hook")

    def hook(state, bucket):
        flat = bucket.buffer()  # (bucket numel,) DDP's flattened gradients
        handle = comm.all_reduce(flat, op="avg", async_op=True)  # (bucket numel,) in flight
        future = torch.futures.Future()
        executor.submit(lambda: future.set_result(handle.wait()))
        return future

    return hook


def _validate_torch(cfg):
    _validate(cfg)
    if cfg.options["comm"] not in COMMS:
        raise ValueError(f"comm={cfg.options['comm']!r} must be one of {COMMS}")


@register("torch-ddp", summary="PyTorch DistributedDataParallel (comm hook through parlab.core.comm)",
          exact=True, options={"bucket_mb": BUCKET_MB, "comm": "parlab", "accum_steps": 1},
          validate=_validate_torch)
def torch_ddp(ctx):
    cfg = ctx.cfg
    model = build_model(cfg)
    ddp = DistributedDataParallel(LossModule(model), bucket_cap_mb=cfg.options["bucket_mb"],
                                  init_sync=False)  # every rank built the same weights from the seed
    hook_timeline = Timeline(ctx.rank)  # the helper thread's waits are not the rank's
    if cfg.options["comm"] == "parlab":
        hook_comm = Comm(None, ledger=ctx.ledger, timeline=hook_timeline, link=cfg.link)
        ddp.register_comm_hook(None, parlab_comm_hook(hook_comm))
    last_grad = [0.0]
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda _: last_grad.__setitem__(0, time.perf_counter()))
    optimizer = make_optimizer(ddp.parameters(), cfg)
    accum = cfg.options["accum_steps"]
    meter = ActivationMeter(exclude=model.parameters())
    losses, memory = [], {}
    for step in range(cfg.steps):
        with ctx.step(step), ctx.ledger.label(phase="grad-sync"):
            batch = step_batch(cfg, step, ctx.rank, ctx.world_size)  # (B/N, ...) rows of this rank
            total = 0.0
            for micro, (x, y) in enumerate(micro_batches(batch, accum)):
                last = micro == accum - 1
                with (ddp.no_sync() if not last else _nothing()):
                    with ctx.span("forward", step=step, micro=micro), meter:
                        loss = ddp(x, y)
                    t0 = time.perf_counter()
                    with meter:
                        (loss / accum).backward()  # the last one all-reduces DDP's buckets
                    t1 = time.perf_counter()
                ctx.timeline.add("compute", "backward", t0, last_grad[0], step=step, micro=micro)
                ctx.timeline.add("wait", "wait DDP buckets", last_grad[0], t1)
                total += loss.item()
            memory = model_memory(model.parameters(), optimizer)
            with ctx.span("optimizer", step=step):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            losses.append(total / accum / ctx.world_size)
    for event in hook_timeline.events:
        if event.kind == "comm":  # buckets in flight, drawn above the rank's row
            ctx.timeline.add("comm", event.name, event.t0, event.t1, **event.args)
    memory["activations"] = meter.peak
    return {"losses": losses, "state": state_of(model) if ctx.rank == 0 else None,
            "memory": memory}


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
