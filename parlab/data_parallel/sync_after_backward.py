"""Gradient sync after backward: per tensor (naive) or per flat bucket (tensor fusion).

Both wait for the whole backward to finish and then communicate, so none of the communication is
hidden: step time = compute + communication. The naive one pays the latency α of an all-reduce
once per parameter tensor; bucketing (Li et al., VLDB 2020, §3.2.3; Horovod's tensor fusion,
Sergeev & Del Balso 2018) packs the gradients into a few flat buffers of `bucket_mb` and pays it
once per bucket, for the same bytes: ring all-reduce 2(N-1)/N·S·4 bytes per rank per buffer.
"""

from __future__ import annotations

from parlab.data_parallel.apply import world_reducer
from parlab.data_parallel.strategy import GradSync


class NaiveSync(GradSync):
    """After backward, one blocking all-reduce (average) per gradient tensor, in parameter order
    (`parlab.data_parallel.reducers.NaiveReducer`). `reduce_fp32`: in mixed precision, reduce each
    16-bit gradient as an fp32 copy (twice the bytes, one rounding instead of one per addition:
    DDP's / FSDP's `reduce_dtype`)."""

    def __init__(self, ctx, model, algo: str = "gloo", reduce_fp32: bool = False, **base):
        super().__init__(ctx, model, **base)
        self.algo, self.reduce_fp32 = algo, reduce_fp32
        self.reducer = world_reducer(model, self.comm, "naive", algo=algo,
                                     reduce_fp32=reduce_fp32)

    def after_backward(self) -> None:
        self.reducer.after_backward()


class BucketedSync(GradSync):
    """After backward, pack gradients into flat buckets, one blocking all-reduce per bucket
    (`parlab.data_parallel.reducers.BucketedReducer`)."""

    def __init__(self, ctx, model, bucket_mb: float, algo: str = "gloo", reduce_fp32: bool = False,
                 **base):
        super().__init__(ctx, model, **base)
        self.algo = algo
        self.reducer = world_reducer(model, self.comm, "bucketed", bucket_mb=bucket_mb, algo=algo,
                                     reduce_fp32=reduce_fp32)
        self.buckets = self.reducer.buckets

    def after_backward(self) -> None:
        self.reducer.after_backward()

    def comm_buffers(self):
        return self.reducer.buffers()
