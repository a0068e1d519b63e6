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

`PriorityReducer` is the mechanism on one group of ranks, apart from any loop; it owns the update
(`parlab.data_parallel.layerwise.OwnsUpdate`). `apply_dp(sync="priority")` attaches it, over the
world for chapter 01's `ddp-priority` (run by `layerwise.DeferredSync`), over a composed model's
dp × cp group for the planner.
"""

from __future__ import annotations

import heapq

from parlab.core.cost import shard_bounds
from parlab.data_parallel.layerwise import OwnsUpdate
from parlab.data_parallel.reducers import OverlapReducer


def partition(numel: int, max_elements: int) -> list[tuple[int, int]]:
    """(start, end) of consecutive pieces of at most `max_elements` (P3's parameter slicing)."""
    return shard_bounds(numel, -(-numel // max_elements))


class PriorityReducer(OwnsUpdate, OverlapReducer):
    """Each ready bucket cut into partitions of at most `partition_kb` KiB, queued by priority
    (the bucket's first parameter in forward order: front layers first); `credit` of them
    released to the network each time a bucket becomes ready in backward, the rest after it;
    each bucket's update waits for its own partitions just before its first layer runs in the
    next forward."""

    options = ("bucket_mb", "partition_kb", "credit", "backwards")

    def __init__(self, comm, params, bucket_mb: float, partition_kb: float = 32.0,
                 credit: int = 1, phase=None, algo: str = "gloo", backwards: int = 1):
        super().__init__(comm, params, bucket_mb, phase, algo, launch=self.queue_partitions,
                         backwards=backwards)
        self.credit = credit
        self.max_elements = max(1, int(partition_kb * 1024) // self.params[0].element_size())
        index_of = {id(p): i for i, p in enumerate(self.params)}
        # priority of a unit: its first parameter in forward order (smaller = sooner needed)
        self.priority = [min(index_of[id(p)] for p in b.params) for b in self.buckets]
        self.forward_order = sorted(range(len(self.buckets)), key=lambda b: self.priority[b])
        self.queue: list[tuple[int, int, int, int]] = []  # (priority, start, bucket, end)
        self.in_flight: dict[int, list] = {}
        self.launch_order: list[tuple[int, int, int]] = []  # (bucket, start, end), last step

    def before_micro(self, last: bool) -> None:
        super().before_micro(last)
        if last:  # (the previous step's partitions are waited on by this forward's pre-hooks)
            self.launch_order = []

    def queue_partitions(self, bucket, flat) -> None:
        for start, end in partition(flat.numel(), self.max_elements):
            heapq.heappush(self.queue, (self.priority[bucket.index], start, bucket.index, end))
        self._release(self.credit)

    def _release(self, count: int) -> None:
        for _ in range(min(count, len(self.queue))):
            _, start, b, end = heapq.heappop(self.queue)
            piece = self.buckets.buckets[b].buffer[start:end]  # (≤ partition,) a view
            self.in_flight.setdefault(b, []).append(self.comm.all_reduce(
                piece, op="avg", algo=self.algo, async_op=True, phase=self.phase))  # in place
            self.launch_order.append((b, start, end))

    def after_backward(self) -> None:
        self.require_owner()
        self.launch_ready(force=True)  # buckets of parameters that got no gradient this step
        self._release(len(self.queue))  # the rest, highest priority first
        self.layerwise.arm()

    def _prepare(self, g: int) -> None:
        for handle in self.in_flight.pop(g, []):
            handle.wait()  # (≤ partition,) averaged in place in the bucket buffer
        self.buckets.unpack(self.buckets.buckets[g])
