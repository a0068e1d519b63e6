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
PyTorch's implementation untouched; its bytes cannot be observed, so each bucket is recorded with
the nominal ring bytes (`nominal=True`: 2(N-1)/N·Ψ·4 per step, as ours) and an emulated link does
not delay it: use it on loopback.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.nn.parallel import DistributedDataParallel

from parlab.core.checks import Choice
from parlab.core.comm import Comm
from parlab.core.trace import Timeline
from parlab.data_parallel.schemes import ACCUM, BUCKET, MIXED, _validate
from parlab.data_parallel.strategy import GradSync
from parlab.engine.loop import LossModule, build_model, micro_batches, train
from parlab.engine.runner import register

COMMS = ("parlab", "torch")


def parlab_comm_hook(comm, issued: list | None = None):
    """A DDP comm hook: average DDP's flat bucket with `comm` (recorded, link-emulated).

    DDP wants a torch Future; a helper thread waits on our Handle and completes it, so the
    autograd thread goes on computing while the bucket is in flight. `issued` (paced runs): the
    helper thread only waits for the data (`Handle.wait_real`) and each handle is appended here,
    for the rank's own thread to `wait()` after backward, which prices it in virtual time.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parlab-ddp-hook")

    def hook(state, bucket):
        flat = bucket.buffer()  # (bucket numel,) DDP's flattened gradients
        handle = comm.all_reduce(flat, op="avg", async_op=True)  # (bucket numel,) in flight
        future = torch.futures.Future()
        if issued is None:
            executor.submit(lambda: future.set_result(handle.wait()))
        else:
            issued.append(handle)
            executor.submit(lambda: future.set_result(handle.wait_real()))
        return future

    return hook


def nominal_record_hook(comm):
    """A DDP comm hook that leaves the all-reduce to PyTorch (its default hook on DDP's process
    group) and records the bucket in the ledger with nominal ring bytes (`Comm.record_nominal`)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state, bucket):
        comm.record_nominal("all_reduce", bucket.buffer())  # (bucket numel,) what a ring moves
        return allreduce_hook(None, bucket)

    return hook


class TorchDDP(GradSync):
    """DDP does the data parallelism: its reducer all-reduces inside backward (hooks), nothing is
    left for `sync`; `no_sync()` on every micro-step but the last."""

    def __init__(self, ctx, model):
        super().__init__(ctx, model)
        cfg = ctx.cfg
        self.ddp = DistributedDataParallel(LossModule(model), bucket_cap_mb=cfg.options["bucket_mb"],
                                           init_sync=False)  # every rank built the seed's weights
        self.hook_timeline = Timeline(ctx.rank)  # the helper thread's waits are not the rank's
        self.paced = ctx.timeline.pacer is not None
        self.issued: list = []  # paced: the buckets' handles of this backward, waited after it
        if cfg.options["comm"] == "parlab":
            # paced: the buckets leave on the rank's own virtual clock, as ddp-overlap's do
            hook_comm = Comm(None, ledger=ctx.ledger, link=cfg.link,
                             timeline=ctx.timeline if self.paced else self.hook_timeline)
            self.ddp.register_comm_hook(None, parlab_comm_hook(hook_comm,
                                                               self.issued if self.paced else None))
        else:  # PyTorch's own gloo all-reduce: bytes not observable, recorded as nominal
            self.ddp.register_comm_hook(None, nominal_record_hook(ctx.comm))
        self.last_grad = 0.0
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._grad_accumulated)

    def _grad_accumulated(self, _) -> None:
        self.last_grad = time.perf_counter()

    def forward_backward(self, step: int, batch) -> float:
        ctx, total = self.ctx, 0.0
        with ctx.ledger.label(phase=self.phase):
            for micro, (x, y) in enumerate(micro_batches(batch, self.accum_steps)):
                last = micro == self.accum_steps - 1
                with contextlib.nullcontext() if last else self.ddp.no_sync():
                    with ctx.span("forward", step=step, micro=micro), self.meter:
                        loss = self.ddp(x, y)
                    if self.paced:
                        self._paced_backward(loss, step, micro)
                    else:
                        t0 = time.perf_counter()
                        with self.meter:
                            (loss / self.accum_steps).backward()  # the last all-reduces DDP's buckets
                        t1 = time.perf_counter()
                if not self.paced:
                    ctx.timeline.add("compute", "backward", t0, self.last_grad, step=step,
                                     micro=micro)
                    ctx.timeline.add("wait", "wait DDP buckets", self.last_grad, t1)
                total += loss.item()
        return total / self.accum_steps / self.shards

    def _paced_backward(self, loss, step: int, micro: int) -> None:
        """Backward as a compute span: each bucket's all-reduce leaves at the virtual time its
        hook fired (the span's compute so far priced); after backward the rank waits for every
        bucket in virtual time. Simplification: the reducer copies the averaged buckets back into
        the gradients inside backward (real time), priced here before the waits."""
        self.issued.clear()
        with self.ctx.span("backward", step=step, micro=micro), self.meter:
            (loss / self.accum_steps).backward()  # DDP's hooks issue the buckets' all-reduces
        for handle in self.issued:
            handle.wait()  # (bucket numel,) priced and drawn on the rank's timeline

    def finish(self) -> None:
        for event in self.hook_timeline.events:
            if event.kind == "comm":  # buckets in flight, drawn above the rank's row
                self.ctx.timeline.add("comm", event.name, event.t0, event.t1, **event.args)


@register("torch-ddp", summary="PyTorch DistributedDataParallel (comm hook through parlab.core.comm)",
          exact=True, options={"bucket_mb": BUCKET, "comm": Choice("parlab", COMMS),
                               "accum_steps": ACCUM}, validate=_validate, precisions=MIXED,
          modelled_as="ddp-overlap")
def torch_ddp(ctx):
    return train(ctx, TorchDDP(ctx, build_model(ctx.cfg)))
