"""DeAR: decouple the all-reduce into a reduce-scatter overlapped with backward and an all-gather
overlapped with the next forward (Zhang, Shi, Chu et al., "DeAR: Accelerating Distributed Deep
Learning with Fine-Grained All-Reduce Pipelining", ICDCS 2023, arXiv 2302.12445).

A ring all-reduce *is* a reduce-scatter followed by an all-gather (Patarasuk & Yuan 2009), each
moving (N-1)/N·S per rank. WFBP has to finish both halves before the optimizer step. DeAR starts
each fused bucket's reduce-scatter from the backward hooks, as WFBP does, but launches the
all-gathers only after backward — first layers first — and lets the next iteration's forward
wait for each bucket's all-gather just before the first layer that needs it, apply that bucket's
update, and go on (`parlab.data_parallel.layerwise`). The second half of the communication now hides behind
the forward pass, which WFBP cannot use. Same bytes as the all-reduce, split in two.

Buffers are padded to a multiple of N elements so every rank's shard has the same length.
`algo="ring"` runs both halves on the pipelined ring of `parlab.core.collectives` (the same
bytes): gloo's own reduce-scatter runs at a fraction of its all-reduce's bus bandwidth on CPU.

`DeARReducer` is the mechanism on one group of ranks, apart from any loop: the reduce-scatters
from the gradient hooks, the all-gathers after backward, and the update it owns — one optimizer
per bucket (`own_update`: the run's, or the loop's own optimizer cut per bucket), stepped in the
next forward by `parlab.data_parallel.layerwise.LayerwiseUpdate`. `apply_dp(sync="dear")` attaches
it, over the world for chapter 01's `dear` scheme (run by `layerwise.DeferredSync`), over a
composed model's dp × cp group for the planner.
"""

from __future__ import annotations

from parlab.data_parallel.layerwise import OwnsUpdate
from parlab.data_parallel.reducers import OverlapReducer


class DeARReducer(OwnsUpdate, OverlapReducer):
    """Reduce-scatter each bucket from the backward hooks (in bucket order, as WFBP); after
    backward, all-gather the averaged shards first layers first; before each bucket's first
    layer in the next forward, wait for its all-gather and step its own optimizer.

    It owns the update (`OwnsUpdate`): `own_update` must give it the optimizers before the
    first backward, and the loop must not step its own; `flush()` after the last step applies
    the updates still owed."""

    options = ("bucket_mb", "backwards")

    def __init__(self, comm, params, bucket_mb: float, phase=None, algo: str = "gloo",
                 backwards: int = 1):
        super().__init__(comm, params, bucket_mb, phase, algo, launch=self.reduce_scatter_bucket,
                         backwards=backwards, multiple_of=comm.size)  # equal shards
        self.gathers: dict[int, object] = {}
        # the next forward meets the last bucket first (buckets are packed from the back)
        self.forward_order = [b.index for b in reversed(self.buckets.buckets)]

    def reduce_scatter_bucket(self, bucket, flat) -> None:
        self.handles[bucket.index] = self.comm.reduce_scatter(
            flat, op="avg", algo=self.algo, async_op=True,
            phase=self.phase)  # (S,) -> (S/N,) this rank's averaged shard

    def after_backward(self) -> None:
        self.require_owner()
        self.launch_ready(force=True)  # buckets of parameters that got no gradient this step
        shards = {b: handle.wait() for b, handle in self.handles.items()}  # (S/N,) each
        for b in self.forward_order:  # first layers first: the next forward needs them first
            self.gathers[b] = self.comm.all_gather(shards[b], algo=self.algo, async_op=True,
                                                   phase=self.phase)  # (S/N,) -> (S,)
        self.layerwise.arm()

    def _prepare(self, g: int) -> None:
        flat = self.gathers.pop(g).wait()  # (S,) the averaged gradients of bucket g
        self.buckets.unpack(self.buckets.buckets[g], flat)
