"""Asynchronous tensor parallelism: the sequence-parallel all-gather and reduce-scatter cut into
ring steps, each overlapped with the matmul of the chunk already at hand.

Wang et al., "Overlap Communication with Dependent Computation via Decomposition in Large Deep
Learning Models" (ASPLOS 2023, §3): a collective followed by a matmul that consumes it becomes
tp point-to-point steps; step s computes on the chunk that arrived at step s−1 while the next
travels (PyTorch's "async TP" is the same micro-pipelining). Applied to SP's column linear
(`parlab.tensor_parallel.ops.GatheredColumnMatmul`): forward y = all_gather(x)·Wᵀ, backward dW
with the shards regathered and dx as a ring reduce-scatter. Bytes are exactly those of the ring
collectives they replace — (tp−1) shards of B·T/tp·C floats per rank per collective — with the
same phases, so chapter 03's closed forms hold (`tests/test_tensor_parallel.py`). Each ring step:
docs/tensor_parallel.md, `parlab.tensor_parallel.async_ops`.
"""

from __future__ import annotations

import torch

from parlab.tensor_parallel.ops import BACKWARD, FORWARD


def _exchange(tensor, comm, phase):
    """Post the receive of a like tensor from r−1, then the send of `tensor` to rank r+1. The
    receive goes first: gloo hands a message over once both sides have posted it, and a send
    posted before its peer's receive can block in the caller for milliseconds (measured here:
    3–4 ms of a 4 ms transfer, which the overlap was meant to hide)."""
    n, r = comm.size, comm.rank
    incoming = torch.empty_like(tensor)
    recv = comm.irecv(incoming, (r - 1) % n, phase=phase)  # (B, T/tp, ·) in
    send = comm.isend(tensor, (r + 1) % n, phase=phase)  # (B, T/tp, ·) out
    return send, recv


def _arrive(handles):
    send, recv = handles
    send.wait()
    return recv.wait()


def _chunk(tensor, index: int, width: int):
    return tensor[:, index * width:(index + 1) * width]  # (B, T/tp, ·)


class RingGatherMatmul(torch.autograd.Function):
    """y = all_gather(x)·Wᵀ as tp ring steps, the transfer of step s overlapping the matmul of
    the chunk already held. Forward moves x's shards round the ring (tp−1 sends of B·T/tp·C);
    backward moves them round again for dW and ring-reduce-scatters dx (tp−1 sends each), every
    transfer overlapped with one chunk's matmul."""

    @staticmethod
    def forward(ctx, shard, weight, comm):
        ctx.comm = comm
        ctx.save_for_backward(shard, weight)
        n, r, width = comm.size, comm.rank, shard.size(1)
        out = shard.new_empty(shard.size(0), n * width, weight.size(0))  # (B, T, out/tp)
        held = shard.contiguous()  # (B, T/tp, C) x_r
        for step in range(n):
            handles = _exchange(held, comm, FORWARD) if step < n - 1 else None
            _chunk(out, (r - step) % n, width).copy_(held @ weight.t())  # (B, T/tp, out/tp)
            if handles:
                held = _arrive(handles)  # (B, T/tp, C) x_{r−step−1}
        return out

    @staticmethod
    def backward(ctx, grad):
        shard, weight = ctx.saved_tensors
        comm = ctx.comm
        n, r, width = comm.size, comm.rank, shard.size(1)
        grad = grad.contiguous()  # (B, T, out/tp)
        grad_weight = torch.zeros_like(weight)  # (out/tp, C)

        def partial(chunk):  # this rank's part of dL/dx for sequence chunk `chunk`
            return _chunk(grad, chunk, width) @ weight  # (B, T/tp, C)

        held = shard.contiguous()  # (B, T/tp, C) x_r, circulating again for dW
        accumulator = partial((r - 1) % n)  # (B, T/tp, C) chunk r−1's sum starts here
        for step in range(n):
            gather = _exchange(held, comm, BACKWARD) if step < n - 1 else None
            scatter = _exchange(accumulator, comm, BACKWARD) if step < n - 1 else None
            source = (r - step) % n
            g = _chunk(grad, source, width)  # (B, T/tp, out/tp)
            grad_weight += g.reshape(-1, g.size(-1)).t() @ held.reshape(-1, held.size(-1))
            if scatter:
                mine = partial((r - step - 2) % n)  # overlapped with the accumulator's transfer
                accumulator = _arrive(scatter) + mine  # (B, T/tp, C) chunk r−step−2 so far
            if gather:
                held = _arrive(gather)  # (B, T/tp, C) x_{r−step−1}
        return accumulator, grad_weight, None  # accumulator: dL/dx_r, summed over the tp ranks


def apply_async_tp(model):
    """Every sequence-parallel column linear of `model` (built by `apply_tp`) computes through
    `RingGatherMatmul` instead of all-gather-then-matmul; returns the model. The arithmetic is
    the same (every chunk's matmul and sum), in another order: equal within fp32 round-off."""
    for module in model.modules():
        if hasattr(module, "ring_overlap"):  # a ColumnParallelLinear
            if not (module.sequence_parallel and module.regather):
                raise ValueError("async TP overlaps sequence parallelism's all-gather: it needs "
                                 f"sequence_parallel=True and regather=True, got "
                                 f"sequence_parallel={module.sequence_parallel}, "
                                 f"regather={module.regather}")
            module.ring_overlap = True
    return model
