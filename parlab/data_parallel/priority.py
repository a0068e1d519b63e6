"""Priority scheduling with tensor partitioning: the first layers' gradients travel first.

Backward produces the last layers' gradients first, so a FIFO network (WFBP) delivers the first
layers' gradients last — exactly the ones the next forward needs first. P3 (Jayarajan et al.,
"Priority-based Parameter Propagation", SysML 2019) and ByteScheduler (Peng et al., "A Generic
Communication Scheduler for Distributed DNN Training Acceleration", SOSP 2019) fix the order:
gradients are cut into small partitions (a message already on the wire cannot be pre-empted, so
small pieces let a high-priority one overtake soon), kept in a priority queue (front layers
first), and released to the network a few at a time ("credit"). With per-layer updates in the
next forward (`parlab.data_parallel.layerwise`), layer 0 starts as soon as its own partitions have arrived.

Every rank must issue its collectives in the same order, and completion times differ between
ranks, so the release clock here is deterministic: `credit` partitions are released each time a
unit of gradients becomes ready in backward (hooks fire in the same order on every rank); what
is left when backward ends goes out in priority order.
"""

from __future__ import annotations

import heapq

from parlab.core.cost import shard_bounds
from parlab.data_parallel.layerwise import LayerwiseUpdate
from parlab.data_parallel.overlap import OverlapSync


def partition(numel: int, max_elements: int) -> list[tuple[int, int]]:
    """(start, end) of consecutive pieces of at most `max_elements` (P3's parameter slicing)."""
    return shard_bounds(numel, -(-numel // max_elements))


class PrioritySync(OverlapSync):
    """Partitioned gradients all-reduced in priority order (front layers first), updated per unit
    just before its next forward."""

    def __init__(self, ctx, model, bucket_mb: float, partition_kb: float, credit: int):
        super().__init__(ctx, model, bucket_mb)
        self.credit = credit
        self.max_elements = max(1, int(partition_kb * 1024) // self.params[0].element_size())
        index_of = {id(p): i for i, p in enumerate(self.params)}
        # priority of a unit: its first parameter in forward order (smaller = sooner needed)
        self.priority = [min(index_of[id(p)] for p in b.params) for b in self.buckets]
        self.layerwise = LayerwiseUpdate(ctx, model, [b.params for b in self.buckets],
                                         self._prepare, lambda: self.forward_span)
        self.set_optimizers(self.layerwise.optimizers)
        self.queue: list[tuple[int, int, int, int]] = []  # (priority, start, bucket, end)
        self.in_flight: dict[int, list] = {}
        self.forward_order = sorted(range(len(self.buckets)), key=lambda b: self.priority[b])
        self.launch_order: list[tuple[int, int, int]] = []  # (bucket, start, end), last step

    def before_micro(self, last: bool) -> None:
        super().before_micro(last)
        if last:  # (the previous step's partitions are waited on by this forward's pre-hooks)
            self.launch_order = []

    def launch(self, bucket, flat) -> None:
        for start, end in partition(flat.numel(), self.max_elements):
            heapq.heappush(self.queue, (self.priority[bucket.index], start, bucket.index, end))
        self._release(self.credit)

    def _release(self, count: int) -> None:
        for _ in range(min(count, len(self.queue))):
            _, start, b, end = heapq.heappop(self.queue)
            piece = self.buckets.buckets[b].buffer[start:end]  # (≤ partition,) a view
            self.in_flight.setdefault(b, []).append(self.comm.all_reduce(piece, op="avg", async_op=True))
            self.launch_order.append((b, start, end))

    def after_backward(self) -> None:
        self._launch_ready(force=True)
        self._release(len(self.queue))  # the rest, highest priority first
        self.layerwise.arm()

    def _prepare(self, g: int) -> None:
        for handle in self.in_flight.pop(g, []):
            handle.wait()  # (≤ partition,) averaged in place in the bucket buffer
        self.buckets.unpack(self.buckets.buckets[g])

    def update(self, step: int) -> None:
        """Deferred to the next forward (per unit)."""
        self.observe_memory()

    def flush(self) -> None:
        self.layerwise.flush(self.forward_order)
