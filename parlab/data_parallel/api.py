"""Chapter 01's gradient synchronisation as a library, for any `nn.Module` and your own optimizer,
the way `torch.nn.parallel.DistributedDataParallel` is used (Li et al., "PyTorch Distributed:
Experiences on Accelerating Data Parallel Training", VLDB 2020):

    from parlab.core.comm import Comm
    from parlab.data_parallel.api import DataParallel

    ddp = DataParallel(model, optimizer, Comm(), sync="overlap", bucket_mb=25)
    for x, y in my_rows_of_the_batch:
        loss_fn(model(x), y).backward()
        ddp.synchronize()            # every trainable gradient is now the average over ranks
        optimizer.step()
        optimizer.zero_grad()
    with ddp.no_sync():              # gradient accumulation: backward without communication
        ...

- Frozen parameters (`requires_grad=False`) are left alone: no hook, no bucket, no bytes.
- A parameter that gets no gradient in a step (an unused branch) is an error naming it, unless
  `find_unused_parameters=True` (DDP's flag and semantics): then each rank's missing gradient
  counts as zeros in the average, and after the average one small all-reduce of a used-map
  (one float per parameter, phase "unused-map") finds the parameters no rank used, whose `.grad`
  stays None — as in one process, where the optimizer skips them. The buckets are launched
  strictly in bucket order on every rank, so a locally unused parameter cannot reorder the
  collectives.
- Tied weights are one parameter (`model.parameters()` yields it once): one gradient, one slot.
- Every byte goes through `Comm` and lands in its ledger; an emulated link applies.

`sync`: "naive" (one all-reduce per tensor after backward), "bucketed" (flat buckets after
backward) or "overlap" (WFBP: buckets launched from gradient hooks while backward runs). DeAR and
the priority scheduler update layer by layer inside the next forward with one optimizer per
group, so they own the optimizer: use them through `parlab.run("dear", ...)`.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch

from parlab.core.checks import Bool, Choice, Float
from parlab.data_parallel.bucketed import BucketedSync, NaiveSync
from parlab.data_parallel.overlap import OverlapSync

SYNCS = ("naive", "bucketed", "overlap")
ALGOS = ("gloo", "ring", "tree", "naive")


class _Context:
    """What a GradSync needs from a run, outside `parlab.run`: the comm, its ledger and timeline."""

    def __init__(self, comm):
        self.comm, self.ledger, self.timeline = comm, comm.ledger, comm.timeline
        self.rank, self.world_size = comm.rank, comm.size
        self.cfg = SimpleNamespace(options={"accum_steps": 1})

    def span(self, name: str, kind: str = "compute", **args):
        return self.timeline.span(name, kind, **args)


class DataParallel:
    """Average the gradients of `model`'s trainable parameters over `comm`'s ranks (see the
    module docstring). Every rank must build the same model with the same initial weights."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, comm,
                 sync: str = "overlap", bucket_mb: float = 25.0, algo: str = "gloo",
                 find_unused_parameters: bool = False):
        Choice(sync, SYNCS).check("sync", sync)
        Choice(algo, ALGOS).check("algo", algo)
        Float(bucket_mb, min=0, unit="MiB").check("bucket_mb", bucket_mb)
        Bool(False).check("find_unused_parameters", find_unused_parameters)
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model={type(model).__name__} must be a torch.nn.Module")
        ctx = _Context(comm)
        if sync == "naive":
            self.strategy = NaiveSync(ctx, model, algo, optimizer=optimizer)
        elif sync == "bucketed":
            self.strategy = BucketedSync(ctx, model, bucket_mb, algo, optimizer=optimizer)
        else:
            self.strategy = OverlapSync(ctx, model, bucket_mb, algo, optimizer=optimizer)
        self.comm, self.find_unused = comm, find_unused_parameters
        names = {id(p): n for n, p in model.named_parameters()}
        self.names = [names[id(p)] for p in self.strategy.params]
        self.strategy.before_micro(last=True)  # the next backward communicates

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside accumulates into `.grad` without communicating (as DDP's no_sync)."""
        self.strategy.before_micro(last=False)
        try:
            yield
        finally:
            self.strategy.before_micro(last=True)

    def synchronize(self) -> None:
        """After backward: wait until every trainable gradient is averaged over the ranks."""
        params = self.strategy.params
        missing = [n for n, p in zip(self.names, params) if p.grad is None]
        if missing and not self.find_unused:
            raise RuntimeError(f"parameters {missing} got no gradient this step; pass "
                               "find_unused_parameters=True if the model does not use every "
                               "parameter in every step")
        used = torch.tensor([float(p.grad is not None) for p in params])  # (P,) before the sync
        self.strategy.after_backward()
        self.strategy.before_micro(last=True)  # ready for the next step's backward
        if self.find_unused:
            self.comm.all_reduce(used, phase="unused-map")  # (P,) ranks that used each parameter
            for p, count in zip(params, used.tolist()):
                if count == 0:
                    p.grad = None  # unused everywhere: the optimizer skips it, as in one process
