"""`torch-powersgd`: PyTorch's own PowerSGD communication hook on torch DDP, beside our `powersgd`.

PyTorch's `powerSGD_hook` (after Vogels et al., "PowerSGD", NeurIPS 2019) runs once per DDP
bucket: plain all-reduce for `start_iter` steps, then each matrix gradient with
(n + m)·r·min_compression_rate < n·m compressed to rank r (three all-reduces per bucket:
uncompressed tensors, every P, every Q — `parlab.compression.cost.torch_powersgd_elements`).
Its collectives bypass `Comm`, so the ledger holds nominal records (`Comm.record_nominal`).

Two traps where the hook meets gloo, both handled: the wrapper waits for the previous bucket's
future before the next bucket's hook (else ranks issue collectives in different orders and gloo
aborts), and `finish` waits until the callbacks are gone (else a rank aborts in teardown with
"Resource deadlock avoided"). How they were found and how ours differs from the hook:
docs/compression.md, `parlab.compression.torch_powersgd`. Default `bucket_mb`=25 (PyTorch's).
"""

from __future__ import annotations

import sys
import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_psgd
from torch.nn.parallel import DistributedDataParallel

from parlab.compression.cost import torch_powersgd_bytes, torch_powersgd_elements
from parlab.core.checks import Bool, Float, Int
from parlab.data_parallel.strategy import GradSync
from parlab.engine.loop import LossModule, build_model, train
from parlab.engine.runner import register

WORKER_DRAIN_S = 10.0  # at most this long for gloo's workers to drop the last step's callbacks


def serialized_powersgd_hook(comm, buckets_seen: list):
    """PyTorch's `powerSGD_hook`, one bucket at a time, each collective recorded as nominal.

    `buckets_seen` collects, per call, (compressed?, [gradient shapes]) so the ledger can be held
    against the closed form on the buckets DDP really made. On a paced clock the hook's own
    compute is not priced (stated): its chain of callbacks runs on gloo's threads or inline on
    this one, whichever finishes first, so counting the inline part would make the rank's virtual
    time depend on the machine's timing."""
    previous: list[torch.futures.Future] = []

    def hook(state, bucket):
        if previous:  # the last bucket's chain must have issued all its collectives
            previous.pop().wait()
        shapes = [tuple(g.shape) for g in bucket.gradients()]
        compressed = state.iter >= state.start_powerSGD_iter
        buckets_seen.append((compressed, shapes))
        flat = bucket.buffer()  # (bucket numel,) DDP's flattened gradients
        if not compressed:
            comm.record_nominal("all_reduce", flat)  # (bucket numel,) plain all-reduce
        else:
            for numel in torch_powersgd_elements(shapes, state.matrix_approximation_rank,
                                                 state.min_compression_rate):
                comm.record_nominal("all_reduce", flat, numel=numel)  # (uncompressed | Σn·r | Σm·r,)
        meter = comm.timeline.pacer.meter if comm.timeline.pacer is not None else None
        counting = meter.counting if meter is not None else None
        if meter is not None:
            meter.counting = False
        try:
            future = torch_psgd.powerSGD_hook(state, bucket)
        finally:
            if meter is not None:
                meter.counting = counting
        if bucket.is_last():  # DDP waits for every bucket at the end of backward
            previous.clear()
        else:
            previous.append(future)
        return future

    return hook


class TorchPowerSGD(GradSync):
    """DDP with PyTorch's PowerSGD hook: the communication happens inside backward.

    The hook's state is `self.powersgd` (not `self.state`, which is Strategy's method)."""

    def __init__(self, ctx, model):
        super().__init__(ctx, model, accum_steps=1)
        o = ctx.cfg.options
        self.ddp = DistributedDataParallel(LossModule(model), bucket_cap_mb=o["bucket_mb"],
                                           init_sync=False)  # every rank built the seed's weights
        self.powersgd = torch_psgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=o["rank"],
            start_powerSGD_iter=o["start_iter"], min_compression_rate=o["min_compression_rate"],
            use_error_feedback=o["error_feedback"], warm_start=o["warm_start"],
            random_seed=ctx.cfg.seed)
        self.buckets_seen: list = []  # this step's (compressed?, shapes) per bucket
        self.buckets_per_step: list = []
        self.ddp.register_comm_hook(self.powersgd, serialized_powersgd_hook(ctx.comm, self.buckets_seen))
        self.idle_refs = sys.getrefcount(self.powersgd)  # no callback chain alive

    def forward_backward(self, step: int, batch) -> float:
        x, y = batch
        with self.ctx.ledger.label(phase=self.phase):
            with self.ctx.span("forward", step=step), self.meter:
                loss = self.ddp(x, y)  # (B/N, ...) this rank's rows
            with self.ctx.span("backward", step=step), self.meter:
                loss.backward()  # DDP's buckets go through the hook, waited for at the end
        self.buckets_per_step.append(list(self.buckets_seen))
        self.buckets_seen.clear()
        return loss.item() / self.shards

    def finish(self) -> None:
        """Return only once the last step's callbacks are gone from gloo's worker threads.

        DDP's wait ends when the hook's last callback sets the bucket's future; the worker thread
        then still has to free the callbacks (each needs the GIL), and they hold the process
        group. If the rank meanwhile returned and destroyed the group, the worker frees the last
        reference, runs the group's destructor, joins itself, and C++ aborts the rank with
        "Resource deadlock avoided". Every callback holds the hook's state, so its reference count
        back at its idle value means none is left."""
        start = time.monotonic()
        while sys.getrefcount(self.powersgd) > self.idle_refs \
                and time.monotonic() < start + WORKER_DRAIN_S:
            time.sleep(1e-3)  # lets the worker take the GIL
        self.drain = {"drained": sys.getrefcount(self.powersgd) <= self.idle_refs,
                      "seconds": time.monotonic() - start}

    def comm_buffers(self):
        kept = (self.powersgd.error_dict, self.powersgd.p_memory_dict, self.powersgd.q_memory_dict)
        return [t for d in kept for t in d.values()]

    def extras(self) -> dict:
        return {"buckets": self.buckets_per_step, "drain": self.drain}  # per step: (compressed?, shapes)


def _validate(cfg) -> None:
    if cfg.batch_size % cfg.world_size:
        raise ValueError(f"batch_size={cfg.batch_size} is not divisible by world_size={cfg.world_size}")
    o = cfg.options
    if (o["error_feedback"] or o["warm_start"]) and o["start_iter"] <= 1:
        raise ValueError(f"start_iter={o['start_iter']} must be > 1 with error_feedback="
                         f"{o['error_feedback']} or warm_start={o['warm_start']} (PyTorch's rule: "
                         "DDP rebuilds its buckets after the first step)")


@register("torch-powersgd", summary="PyTorch's powerSGD_hook on torch DDP (gloo), nominal bytes",
          exact=False, options={"rank": Int(4, min=1), "start_iter": Int(2, min=0),
                                "min_compression_rate": Float(2.0, min=0),
                                "error_feedback": Bool(True), "warm_start": Bool(True),
                                "bucket_mb": Float(25.0, min=0, unit="MiB")},
          validate=_validate, torch_collectives=True,
          forms={"bucket_bytes": torch_powersgd_bytes})  # summed over the buckets DDP made
def torch_powersgd(ctx):
    return train(ctx, TorchPowerSGD(ctx, build_model(ctx.cfg)))
