"""Gradient buckets: many small gradients packed into a few flat buffers, so that one collective
moves many tensors and pays the per-message latency α once (tensor fusion).

PyTorch DDP (Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel
Training", VLDB 2020, §3.2.3) assigns parameters to buckets in *reverse* registration order —
roughly the order backward produces their gradients — closing a bucket when the next gradient
would push it past `bucket_cap_mb`. Horovod calls the same idea tensor fusion; DeAR (Zhang et
al., ICDCS 2023) tunes the fusion size. `plan_buckets` is that rule, the single source of the
bucket count the tests predict from `bucket_mb`, and `Buckets` holds the flat buffers: each
parameter's gradient is a slice `[offset, offset + numel)` of its bucket's buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from parlab.core.cost import round_up

MB = 2 ** 20  # bucket_mb is in MiB, as PyTorch's bucket_cap_mb


def plan_buckets(numels: list[int], bucket_mb: float, element_size: int = 4) -> list[list[int]]:
    """Indices of the parameters in each bucket, in the order the buckets are communicated.

    Parameters are taken in reverse order (the last layer's gradients are ready first); a bucket
    closes when adding the next parameter would exceed `bucket_mb` MiB. A parameter larger than
    the cap gets a bucket of its own; `bucket_mb=0` gives one bucket per parameter.
    """
    cap = bucket_mb * MB
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index in reversed(range(len(numels))):
        nbytes = numels[index] * element_size
        if current and size + nbytes > cap:
            buckets.append(current)
            current, size = [], 0
        current.append(index)
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


def padded(numel: int, multiple_of: int) -> int:
    """`numel` rounded up to a multiple of `multiple_of`."""
    return round_up(numel, multiple_of)


@dataclass
class Bucket:
    index: int
    params: list  # torch.nn.Parameter, in the order they are packed
    offsets: list  # element offset of each param in `buffer`
    buffer: torch.Tensor  # (padded numel,) flat float32

    @property
    def numel(self) -> int:
        return sum(p.numel() for p in self.params)

    def views(self):
        """(param, its slice of the buffer shaped like the param) pairs."""
        for p, offset in zip(self.params, self.offsets):
            yield p, self.buffer[offset:offset + p.numel()].view_as(p)  # (param shape)


class Buckets:
    """Flat gradient buffers for `params` laid out by `plan_buckets`.

    `multiple_of`: pad each buffer to a multiple of this many elements (DeAR pads to the world
    size so every rank's reduce-scatter shard has the same length); padding never changes which
    parameters share a bucket. `dtype`: the buffers' dtype (default: the parameters'; fp32 to
    reduce 16-bit gradients in fp32, `reduce_dtype="fp32"`).
    """

    def __init__(self, params, bucket_mb: float, multiple_of: int = 1, dtype=None):
        self.params = list(params)
        numels = [p.numel() for p in self.params]
        dtype = dtype or (self.params[0].dtype if self.params else torch.float32)
        plan = plan_buckets(numels, bucket_mb, torch.empty((), dtype=dtype).element_size())
        self.buckets: list[Bucket] = []
        self.bucket_of: dict[int, int] = {}  # id(param) -> bucket index
        for b, indices in enumerate(plan):
            members = [self.params[i] for i in indices]
            offsets, total = [], 0
            for p in members:
                offsets.append(total)
                total += p.numel()
                self.bucket_of[id(p)] = b
            buffer = torch.zeros(padded(total, multiple_of), dtype=dtype)
            self.buckets.append(Bucket(b, members, offsets, buffer))

    def __len__(self) -> int:
        return len(self.buckets)

    def __iter__(self):
        return iter(self.buckets)

    def pack(self, bucket: Bucket) -> torch.Tensor:
        """Copy the bucket's gradients into its buffer (a missing gradient counts as zero)."""
        for p, view in bucket.views():
            if p.grad is None:
                view.zero_()
            else:
                view.copy_(p.grad)
        return bucket.buffer

    def unpack(self, bucket: Bucket, flat: torch.Tensor | None = None) -> None:
        """Write the (reduced) buffer back into the parameters' .grad."""
        flat = bucket.buffer if flat is None else flat
        for p, offset in zip(bucket.params, bucket.offsets):
            grad = flat[offset:offset + p.numel()].view_as(p)  # (param shape)
            if p.grad is None:
                p.grad = grad.to(p.dtype, copy=True)
            else:
                p.grad.copy_(grad)

    def buffer_bytes(self) -> int:
        return sum(b.buffer.numel() * b.buffer.element_size() for b in self.buckets)
