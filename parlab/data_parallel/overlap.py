"""Wait-free backpropagation (WFBP): all-reduce each bucket while backward is still running.

Backward produces gradients from the last layer to the first. As soon as every gradient of a
bucket has been accumulated (`Tensor.register_post_accumulate_grad_hook`), its async all-reduce
starts, and backward goes on computing earlier layers while the bytes move; the optimizer waits
for all of them (Zhang et al., "Poseidon", USENIX ATC 2017, named WFBP; PyTorch DDP's reducer,
Li et al., VLDB 2020, §3.2.3). Only the communication that outlasts backward stays exposed —
mostly the last bucket, which holds the first layers.

Every rank must issue the same collectives in the same order (gloo matches them by order, and
two same-sized buckets swapped would be summed with each other *silently*). Hooks fire in the
same order on every rank, but to be safe against a gradient arriving early, buckets are launched
strictly in bucket order: bucket k goes only when buckets 0..k-1 have gone (as DDP does).
"""

from __future__ import annotations

from parlab.data_parallel.buckets import Buckets
from parlab.data_parallel.sync import GradSync


class OverlapSync(GradSync):
    """Bucketed async all-reduce launched from gradient hooks; waited on before the update."""

    def __init__(self, ctx, model, bucket_mb: float, algo: str = "gloo", **base):
        super().__init__(ctx, model, **base)
        self.algo = algo
        self.buckets = Buckets(self.params, bucket_mb)
        self.handles: dict[int, object] = {}
        self.pending = [len(b.params) for b in self.buckets]
        self.next_launch = 0
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def before_micro(self, last: bool) -> None:
        super().before_micro(last)
        if last:
            self.handles, self.next_launch = {}, 0
            self.pending = [len(b.params) for b in self.buckets]

    def _grad_ready(self, p) -> None:
        if not self.last_micro:  # an accumulation micro-step: no communication (no_sync)
            return
        b = self.buckets.bucket_of[id(p)]
        self.pending[b] -= 1
        self._launch_ready()

    def _launch_ready(self, force: bool = False) -> None:
        while self.next_launch < len(self.buckets) and (force or self.pending[self.next_launch] == 0):
            bucket = self.buckets.buckets[self.next_launch]
            self.next_launch += 1
            self.launch(bucket, self.buckets.pack(bucket))

    def launch(self, bucket, flat) -> None:
        """Start the bucket's communication (subclasses: reduce-scatter, prioritised chunks)."""
        self.handles[bucket.index] = self.comm.all_reduce(
            flat, op="avg", algo=self.algo, async_op=True)  # (bucket numel,) in flight

    def after_backward(self) -> None:
        self._launch_ready(force=True)  # buckets of parameters that got no gradient this step
        for bucket in self.buckets:
            self.handles[bucket.index].wait()  # (bucket numel,) averaged over ranks
            self.buckets.unpack(bucket)

    def comm_buffers(self):
        return [b.buffer for b in self.buckets]
