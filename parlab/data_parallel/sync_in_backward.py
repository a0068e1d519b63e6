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

from parlab.data_parallel.apply import world_reducer
from parlab.data_parallel.strategy import GradSync


class OverlapSync(GradSync):
    """Bucketed async all-reduce launched from gradient hooks; waited on before the update — the
    loop's strategy around `parlab.data_parallel.reducers.OverlapReducer` (`apply_dp`'s)."""

    def __init__(self, ctx, model, bucket_mb: float, algo: str = "gloo", **base):
        super().__init__(ctx, model, **base)
        self.algo = algo
        self.reducer = world_reducer(model, self.comm, "overlap", bucket_mb=bucket_mb, algo=algo)

    @property
    def buckets(self):
        return self.reducer.buckets

    @buckets.setter
    def buckets(self, buckets) -> None:
        self.reducer.set_buckets(buckets)

    @property
    def handles(self) -> dict:
        return self.reducer.handles

    def before_micro(self, last: bool) -> None:
        super().before_micro(last)
        self.reducer.before_micro(last)

    def after_backward(self) -> None:
        self.reducer.after_backward()

    def comm_buffers(self):
        return self.reducer.buffers()
