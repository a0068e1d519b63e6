"""Gradient sync after backward: per tensor (naive) or per flat bucket (tensor fusion).

Both wait for the whole backward to finish and then communicate, so none of the communication is
hidden: step time = compute + communication. The naive one pays the latency α of an all-reduce
once per parameter tensor; bucketing (Li et al., VLDB 2020, §3.2.3; Horovod's tensor fusion,
Sergeev & Del Balso 2018) packs the gradients into a few flat buffers of `bucket_mb` and pays it
once per bucket, for the same bytes: ring all-reduce 2(N-1)/N·S·4 bytes per rank per buffer.
"""

from __future__ import annotations

import torch

from parlab.data_parallel.buckets import Buckets
from parlab.data_parallel.sync import GradSync


class NaiveSync(GradSync):
    """After backward, one blocking all-reduce (average) per gradient tensor, in parameter order.
    `reduce_fp32`: in mixed precision, reduce each 16-bit gradient as an fp32 copy (twice the
    bytes, one rounding instead of one per addition: DDP's / FSDP's `reduce_dtype`)."""

    def __init__(self, ctx, model, algo: str = "gloo", reduce_fp32: bool = False, **base):
        super().__init__(ctx, model, **base)
        self.algo, self.reduce_fp32 = algo, reduce_fp32

    def after_backward(self) -> None:
        for p in self.params:
            if p.grad is None:  # no gradient on this rank this step: it contributes zeros
                p.grad = torch.zeros_like(p)
            if self.reduce_fp32 and p.grad.dtype != torch.float32:
                wide = p.grad.float()  # (param shape,) fp32 copy of the 16-bit gradient
                self.comm.all_reduce(wide, op="avg", algo=self.algo)  # (param shape,) all ranks
                p.grad.copy_(wide)
                continue
            self.comm.all_reduce(p.grad, op="avg", algo=self.algo)  # (param shape,) all ranks


class BucketedSync(GradSync):
    """After backward, pack gradients into flat buckets, one blocking all-reduce per bucket."""

    def __init__(self, ctx, model, bucket_mb: float, algo: str = "gloo", reduce_fp32: bool = False,
                 **base):
        super().__init__(ctx, model, **base)
        self.algo = algo
        self.buckets = Buckets(self.params, bucket_mb,
                               dtype=torch.float32 if reduce_fp32 else None)  # fp32: reduce_dtype

    def after_backward(self) -> None:
        for bucket in self.buckets:
            flat = self.buckets.pack(bucket)  # (bucket numel,) gradients side by side
            self.comm.all_reduce(flat, op="avg", algo=self.algo)  # (bucket numel,) all ranks
            self.buckets.unpack(bucket)

    def comm_buffers(self):
        return [b.buffer for b in self.buckets]
