"""Gradient reducers: *when and how* gradients move, apart from the training loop that runs them.

A reducer averages the gradients of a parameter list over one group of ranks (a `Comm`: the
world in chapter 01's schemes, the dp × cp group of a mesh in `parlab.data_parallel.apply_dp`).
Its four calls are the moments any loop has:

    attach()             once: register gradient hooks (WFBP), if the reducer has any;
    before_micro(last)   before each micro-batch's forward; `last`: this backward communicates
                         (the earlier ones only accumulate: DDP's `no_sync()`);
    after_backward()     after the last backward: every gradient ends up averaged in `.grad`;
    buffers()            the communication buffers it holds (for the memory count);
    flush()              after the last step (a reducer that owns the update applies what it owes).

A reducer whose communication ends only in the *next* forward (`owns_update`: DeAR,
`parlab.data_parallel.dear.DeARReducer`) cannot leave averaged gradients in `.grad` after
backward; the loop hands it its optimizer instead (`own_update`), it steps one piece of it per
bucket before that bucket's first layer runs, and the loop's own optimizer step is skipped.

Chapter 01's `GradSync` strategies (`sync_after_backward.NaiveSync`, `BucketedSync`,
`sync_in_backward.OverlapSync`) are the loop's strategy around one of these, attached by
`apply_dp` (over the world), as the planner's composed step calls the one it attached. The
reductions are those of the chapter's papers: one flat bucket or one all-reduce per tensor;
buckets of `bucket_mb` after backward (Li et al., "PyTorch Distributed", VLDB 2020, §3.2.3;
Horovod's tensor fusion); the same buckets launched from post-accumulate-grad hooks while
backward runs (WFBP, Zhang et al., Poseidon, USENIX ATC 2017), launched strictly in bucket
order so every rank issues the same collectives in the same order.

`phase`: the ledger phase every message is recorded under (None: the run's current label).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from parlab.data_parallel.bucket_packing import Buckets
from parlab.data_parallel.flat_all_reduce import all_reduce_flat


class GradientReducer:
    """Base reducer: one flat bucket of the parameters that have a gradient, all-reduced (average)
    after backward (`parlab.data_parallel.flat_all_reduce.all_reduce_flat`)."""

    during_backward = False  # all of its communication happens in `after_backward`
    owns_update = False  # True: it steps the optimizer itself, in the next forward (`own_update`)
    options: tuple = ()  # the keyword options it takes besides comm, params, phase, algo

    def __init__(self, comm, params, phase: str | None = None, algo: str = "gloo"):
        self.comm, self.params, self.phase, self.algo = comm, list(params), phase, algo
        self.last_micro = True

    def attach(self) -> GradientReducer:
        return self

    def before_micro(self, last: bool) -> None:
        self.last_micro = last

    def after_backward(self) -> None:
        present = [p for p in self.params if p.grad is not None]
        if present:
            all_reduce_flat(self.comm, present, "avg", self.phase)  # (Σ numel,) over the group

    def buffers(self) -> list[torch.Tensor]:
        return []

    def flush(self) -> None:
        """After the last step: nothing owed (a reducer that owns the update applies it here)."""


class NaiveReducer(GradientReducer):
    """One blocking all-reduce (average) per gradient tensor, in parameter order. `reduce_fp32`:
    a 16-bit gradient is reduced as an fp32 copy (DDP's / FSDP's `reduce_dtype`)."""

    options = ("reduce_fp32",)

    def __init__(self, comm, params, phase=None, algo="gloo", reduce_fp32: bool = False):
        super().__init__(comm, params, phase, algo)
        self.reduce_fp32 = reduce_fp32

    def after_backward(self) -> None:
        for p in self.params:
            if p.grad is None:  # no gradient on this rank this step: it contributes zeros
                p.grad = torch.zeros_like(p)
            if self.reduce_fp32 and p.grad.dtype != torch.float32:
                wide = p.grad.float()  # (param shape,) fp32 copy of the 16-bit gradient
                self.comm.all_reduce(wide, op="avg", algo=self.algo,
                                     phase=self.phase)  # (param shape,) all ranks
                p.grad.copy_(wide)
                continue
            self.comm.all_reduce(p.grad, op="avg", algo=self.algo,
                                 phase=self.phase)  # (param shape,) all ranks


class BucketedReducer(GradientReducer):
    """Gradients packed into flat buckets of `bucket_mb` MiB (`parlab.data_parallel.bucket_packing`),
    one blocking all-reduce per bucket after backward."""

    options = ("bucket_mb", "reduce_fp32")

    def __init__(self, comm, params, bucket_mb: float, phase=None, algo="gloo",
                 reduce_fp32: bool = False):
        super().__init__(comm, params, phase, algo)
        self.buckets = Buckets(self.params, bucket_mb,
                               dtype=torch.float32 if reduce_fp32 else None)  # fp32: reduce_dtype

    def after_backward(self) -> None:
        for bucket in self.buckets:
            flat = self.buckets.pack(bucket)  # (bucket numel,) gradients side by side
            self.comm.all_reduce(flat, op="avg", algo=self.algo,
                                 phase=self.phase)  # (bucket numel,) all ranks
            self.buckets.unpack(bucket)

    def buffers(self):
        return [b.buffer for b in self.buckets]


class OverlapReducer(GradientReducer):
    """WFBP: a bucket's async all-reduce starts from the hook of its last gradient while backward
    goes on; `after_backward` launches what is left and waits for every bucket.

    `launch(bucket, flat)`: how a bucket starts (default `all_reduce_bucket`; chapter 01's DeAR
    reduce-scatters, its priority scheduler cuts partitions); it stores a handle in `handles`.
    `backwards`: how many backward passes accumulate into each gradient after the last
    `before_micro(last=True)` — 1 when the loop marks the last micro-batch itself, m when a
    pipeline executor runs all m micro-batches' backwards (a gradient is ready at its m-th).
    `multiple_of`: pad each bucket's buffer to a multiple of this many elements (a reduce-scatter's
    equal shards)."""

    during_backward = True  # its communication starts inside backward
    options = ("bucket_mb", "backwards")

    def __init__(self, comm, params, bucket_mb: float, phase=None, algo="gloo",
                 launch: Callable | None = None, backwards: int = 1, multiple_of: int = 1):
        super().__init__(comm, params, phase, algo)
        self.launch = launch or self.all_reduce_bucket
        self.backwards = backwards
        self.arrived: dict[int, int] = {}  # id(param) -> backwards accumulated this step
        self.set_buckets(Buckets(self.params, bucket_mb, multiple_of=multiple_of))

    def set_buckets(self, buckets: Buckets) -> None:
        """Use `buckets` (the same grouping, e.g. padded for a reduce-scatter); resets the step."""
        self.buckets = buckets
        self.handles: dict[int, object] = {}
        self.pending = [len(b.params) for b in buckets]
        self.next_launch = 0

    def attach(self) -> OverlapReducer:
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._grad_ready)
        return self

    def before_micro(self, last: bool) -> None:
        super().before_micro(last)
        if last:
            self.handles, self.next_launch, self.arrived = {}, 0, {}
            self.pending = [len(b.params) for b in self.buckets]

    def _grad_ready(self, p) -> None:
        if not self.last_micro:  # an accumulation micro-step: no communication (no_sync)
            return
        if self.backwards > 1:
            self.arrived[id(p)] = self.arrived.get(id(p), 0) + 1
            if self.arrived[id(p)] < self.backwards:  # more micro-batches still to accumulate
                return
        self.pending[self.buckets.bucket_of[id(p)]] -= 1
        self.launch_ready()

    def launch_ready(self, force: bool = False) -> None:
        """Launch the buckets whose gradients are all in, strictly in bucket order (`force`: all)."""
        while self.next_launch < len(self.buckets) and (force or self.pending[self.next_launch] == 0):
            bucket = self.buckets.buckets[self.next_launch]
            self.next_launch += 1
            self.launch(bucket, self.buckets.pack(bucket))

    def all_reduce_bucket(self, bucket, flat) -> None:
        self.handles[bucket.index] = self.comm.all_reduce(
            flat, op="avg", algo=self.algo, async_op=True, phase=self.phase)  # (bucket numel,)

    def after_backward(self) -> None:
        self.launch_ready(force=True)  # buckets of parameters that got no gradient this step
        for bucket in self.buckets:
            self.handles[bucket.index].wait()  # (bucket numel,) averaged over ranks
            self.buckets.unpack(bucket)
        # waited: let the handles go now, with the gloo work objects (and their tensors) they
        # hold, not at the next step; after the last step the hooks ↔ reducer cycle would keep
        # them until the gc or interpreter finalisation, where a gloo thread taking the GIL
        # aborts the process (parlab.core.rank_process)
        self.handles = {}

    def buffers(self):
        return [b.buffer for b in self.buckets]


REDUCERS = {"flat": GradientReducer, "naive": NaiveReducer, "bucketed": BucketedReducer,
            "overlap": OverlapReducer}
BUCKETED = ("bucketed", "overlap")  # the reducers that take `bucket_mb`


def make_reducer(sync: str, comm, params, bucket_mb: float = 25.0, phase: str | None = None,
                 algo: str = "gloo", backwards: int = 1, reducers: dict | None = None,
                 **options) -> GradientReducer:
    """The reducer named `sync` (of `reducers`, default `REDUCERS`: "flat", "naive", "bucketed",
    "overlap"), attached, given the options it takes (its `options`: `bucket_mb`, `backwards`
    — see `OverlapReducer` —, `reduce_fp32`, ...)."""
    reducers = REDUCERS if reducers is None else reducers
    if sync not in reducers:
        raise ValueError(f"sync={sync!r} must be one of {tuple(reducers)}")
    given = {"bucket_mb": bucket_mb, "backwards": backwards, **options}
    cls = reducers[sync]
    return cls(comm, params, phase=phase, algo=algo,
               **{k: given[k] for k in cls.options if k in given}).attach()
