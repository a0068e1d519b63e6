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
"""

from __future__ import annotations

from parlab.data_parallel.buckets import Buckets
from parlab.data_parallel.layerwise import LayerwiseUpdate
from parlab.data_parallel.overlap import OverlapSync


class DeARSync(OverlapSync):
    """Reduce-scatter in backward hooks; all-gather + update per bucket in the next forward."""

    def __init__(self, ctx, model, bucket_mb: float, algo: str = "gloo"):
        super().__init__(ctx, model, bucket_mb, algo)
        self.buckets = Buckets(self.params, bucket_mb, multiple_of=self.comm.size)
        self.layerwise = LayerwiseUpdate(ctx, model, [b.params for b in self.buckets],
                                         self._prepare, lambda: self.forward_span)
        self.set_optimizers(self.layerwise.optimizers)
        self.gathers: dict[int, object] = {}
        # the next forward meets the last bucket first (buckets are packed from the back)
        self.forward_order = [b.index for b in reversed(self.buckets.buckets)]

    def launch(self, bucket, flat) -> None:
        self.handles[bucket.index] = self.comm.reduce_scatter(
            flat, op="avg", algo=self.algo, async_op=True)  # (S,) -> (S/N,) this rank's averaged shard

    def after_backward(self) -> None:
        self._launch_ready(force=True)
        shards = {b: handle.wait() for b, handle in self.handles.items()}  # (S/N,) each
        for b in self.forward_order:  # first layers first: the next forward needs them first
            self.gathers[b] = self.comm.all_gather(shards[b], algo=self.algo,
                                                   async_op=True)  # (S/N,) -> (S,)
        self.layerwise.arm()

    def _prepare(self, g: int) -> None:
        flat = self.gathers.pop(g).wait()  # (S,) the averaged gradients of bucket g
        self.buckets.unpack(self.buckets.buckets[g], flat)

    def update(self, step: int) -> None:
        """Deferred: each bucket is updated in the next forward, after its all-gather."""
        self.observe_memory()

    def flush(self) -> None:
        self.layerwise.flush(self.forward_order)
