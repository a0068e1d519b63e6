"""Reduce-scatter and all-gather: the sharded halves of an all-reduce, as `Comm` methods.

A ring all-reduce is a reduce-scatter followed by an all-gather (Patarasuk & Yuan, JPDC 2009);
ZeRO, FSDP, sequence parallelism and DeAR call the halves on their own. Shards follow
`parlab.core.cost.shard_sizes`, so any length works: gloo's collectives need equal shards, so
uneven ones are padded to the largest (equal ones go to gloo as they are, with no copy), and the
hand-written ring (`algo="ring"`) takes them exactly. `out=` writes the result into a caller's
buffer, as `torch.distributed`'s `*_into_tensor` forms and FSDP's reused all-gather buffers do.
Where the C library hands freed memory back to the kernel, a fresh 64 MB result faults in 16,384
new pages on every call: measured so in `bench all` before launched ranks kept freed memory
(`parlab.core.allocator`), the ring's 64 MB all-gather ran at 0.52–0.69 GB/s with fresh results,
1.05–1.83 GB/s with reused ones.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from parlab.core import collectives, cost
from parlab.core.ledger import Traffic

REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
              "min": dist.ReduceOp.MIN}


def predivide(tensor) -> bool:
    """Whether an average divides by N *before* summing: for 16-bit tensors (mixed precision),
    as PyTorch DDP's all-reduce hook does, so that the sum of N fp16 gradients cannot overflow
    (max 65504) where their mean does not. fp32 sums first, then divides (unchanged)."""
    return tensor.dtype in (torch.float16, torch.bfloat16)


def _out_buffer(out, numel: int, dtype):
    """`out` flattened, after checking it can hold a result of `numel` elements of `dtype`."""
    if out is None:
        return None
    if not (isinstance(out, torch.Tensor) and out.is_contiguous() and out.numel() == numel
            and out.dtype == dtype):
        raise ValueError(f"out must be a contiguous {dtype} tensor of {numel} elements, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} of shape "
                         f"{tuple(getattr(out, 'shape', ()))}")
    return out.view(-1)


class ShardedCollectives:
    """`reduce_scatter` and `all_gather` of `parlab.core.comm.Comm` (which records and times them)."""

    def reduce_scatter(self, tensor, op="sum", dim=0, algo="gloo", async_op=False, phase=None,
                       out=None):
        """Reduce `tensor` over the group; return this rank's chunk along `dim` (shard_sizes).
        `out`: a contiguous buffer of that chunk's numel to write into (one reused across calls
        spares fresh pages, as FSDP's buffers do); the result is then a view of it."""
        if algo not in ("gloo", "ring"):
            raise ValueError(f"algo={algo!r} for reduce_scatter must be gloo or ring")
        if op not in REDUCE_OPS:
            raise ValueError(f"op={op!r} must be one of {sorted(REDUCE_OPS)}")
        rows = tensor.shape[dim]
        inner = tensor.numel() // max(rows, 1)
        sizes = [s * inner for s in cost.shard_sizes(rows, self.size)]
        mine, width = sizes[self.rank], max(sizes)
        target = _out_buffer(out, mine, tensor.dtype)  # (S/N,) or None
        flat = tensor.movedim(dim, 0).contiguous().reshape(-1)  # (rows·inner,) chunks in order
        if op == "avg" and predivide(tensor):
            flat, op = flat / self.size, "sum"  # (rows·inner,) 16-bit: divide first, then sum
        out_shape = list(tensor.movedim(dim, 0).shape)
        out_shape[0] = cost.shard_sizes(rows, self.size)[self.rank]

        def finish(shard):  # (rows/N·inner,) -> tensor's layout
            shard = shard.reshape(out_shape).movedim(0, dim)
            return shard.div_(self.size) if op == "avg" else shard

        if algo == "ring":
            return self._handwritten("reduce_scatter", "ring", tensor, phase, async_op,
                                     lambda t: finish(collectives.ring_reduce_scatter(
                                         self, flat, sizes, op, t, out=target)))
        if all(s == width for s in sizes):
            padded = flat  # (N·chunk,) already equal chunks: gloo reads it as it is
        else:
            padded = flat.new_zeros(width * self.size)  # (N·max chunk,) equal chunks for gloo
            for i, (lo, hi) in enumerate(cost.chunk_bounds(sizes)):
                padded[i * width:i * width + (hi - lo)] = flat[lo:hi]
        result = target if target is not None and mine == width else flat.new_empty(width)
        sent, recv, rounds = cost.ring_reduce_scatter(padded.numel(), self.size, self.rank)
        traffic = Traffic(sent, recv, rounds, self._ring_peers())

        def unpad(_):  # (max chunk,) -> (S/N,) in `out` when given
            shard = result[:mine]
            return finish(target.copy_(shard) if target is not None and result is not target
                          else shard)

        return self._gloo("reduce_scatter", tensor, traffic, phase, async_op,
                          lambda: [dist.reduce_scatter_single(result, padded, REDUCE_OPS[op],
                                                              self.group, True)], finish=unpad)

    def all_gather(self, shard, dim=0, sizes=None, algo="gloo", async_op=False, phase=None,
                   out=None):
        """Concatenate every rank's `shard` along `dim`. `sizes`: each rank's length along dim
        (default: all equal to this shard's). `out`: a contiguous buffer of the gathered numel to
        write into (reused across calls, as FSDP's are); the result is then a view of it."""
        if algo not in ("gloo", "ring"):
            raise ValueError(f"algo={algo!r} for all_gather must be gloo or ring")
        sizes = list(sizes) if sizes is not None else [shard.shape[dim]] * self.size
        if len(sizes) != self.size or sizes[self.rank] != shard.shape[dim]:
            raise ValueError(f"sizes={sizes} do not match {self.size} ranks with this rank's "
                             f"shard of {shard.shape[dim]} along dim {dim}")
        moved = shard.movedim(dim, 0).contiguous()  # (rows_r, ...)
        inner = math.prod(moved.shape[1:])
        full_shape = [sum(sizes)] + list(moved.shape[1:])
        flat_sizes = [s * inner for s in sizes]
        target = _out_buffer(out, sum(flat_sizes), shard.dtype)  # (S,) or None

        def finish(flat):  # (Σ rows·inner,) -> gathered tensor in shard's layout
            return flat.reshape(full_shape).movedim(0, dim)

        if algo == "ring":
            return self._handwritten("all_gather", "ring", shard, phase, async_op,
                                     lambda t: finish(collectives.ring_all_gather(
                                         self, moved.reshape(-1), flat_sizes, t, out=target)),
                                     numel=sum(flat_sizes))
        width = max(flat_sizes)
        if all(s == width for s in flat_sizes):  # equal shards: no padding, no copy after
            padded_in = moved.reshape(-1)  # (S/N,)
            padded_out = target if target is not None else moved.new_empty(width * self.size)
        else:
            padded_in = moved.new_zeros(width)
            padded_in[:flat_sizes[self.rank]] = moved.reshape(-1)
            padded_out = moved.new_empty(width * self.size)  # (N·max chunk,)
        sent, recv, rounds = cost.ring_all_gather(padded_out.numel(), self.size, self.rank)
        traffic = Traffic(sent, recv, rounds, self._ring_peers())

        def unpad(_):
            if padded_out.numel() == sum(flat_sizes):
                return finish(padded_out)
            parts = [padded_out[i * width:i * width + s] for i, s in enumerate(flat_sizes)]
            return finish(torch.cat(parts) if target is None else torch.cat(parts, out=target))

        return self._gloo("all_gather", shard, traffic, phase, async_op,
                          lambda: [dist.all_gather_single(padded_out, padded_in, self.group,
                                                          True)], finish=unpad,
                          numel=sum(flat_sizes))

