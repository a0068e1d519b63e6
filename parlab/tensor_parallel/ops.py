"""The communication operators of tensor and sequence parallelism, as autograd Functions.

Megatron-LM (Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language Models
Using Model Parallelism", 2019, §3 and Fig. 3): f (identity forward, all-reduce backward; before
a column-parallel linear) and g (all-reduce forward, identity backward; after a row-parallel one).
Sequence parallelism (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models", MLSys 2023, §4.2.2 and Fig. 6) replaces them by all-gather / reduce-scatter along the
sequence and their conjugates: the same bytes as TP (a ring all-reduce *is* a reduce-scatter
then an all-gather), 1/tp of the LayerNorm-region activations. `GatheredColumnMatmul` saves only
its input's sequence shard and all-gathers it again in backward.

Every Function takes the tensor-parallel `Comm` as an argument: nothing global. Ops are labelled
phase "tp-forward" / "tp-backward" in the ledger. In full: docs/tensor_parallel.md,
`parlab.tensor_parallel.ops`.
"""

from __future__ import annotations

import torch

FORWARD, BACKWARD = "tp-forward", "tp-backward"


class CopyToTensorParallel(torch.autograd.Function):
    """f: forward passes x (B, T, C) through unchanged; backward all-reduces its gradient (B, T, C)
    over the tp group, because every rank's column shard contributes a part of dL/dx."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)  # (B, T, C) the same data, a new autograd node

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()  # (B, T, C) all-reduced in place below
        ctx.comm.all_reduce(grad, phase=BACKWARD)  # (B, T, C) summed over tp
        return grad, None


class ReduceFromTensorParallel(torch.autograd.Function):
    """g: forward all-reduces the partial sums (B, T, C) of a row-parallel linear over the tp
    group; backward passes the gradient (B, T, C) unchanged (the sum's derivative is 1)."""

    @staticmethod
    def forward(ctx, partial, comm):
        total = partial.contiguous().clone()  # (B, T, C) all-reduced in place below
        comm.all_reduce(total, phase=FORWARD)  # (B, T, C) summed over tp
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GatherFromSequenceParallel(torch.autograd.Function):
    """ḡ: forward all-gathers the sequence shards (B, T/tp, C) into (B, T, C); backward
    reduce-scatters the gradient (B, T, C) back to (B, T/tp, C), summing every rank's part."""

    @staticmethod
    def forward(ctx, shard, comm):
        ctx.comm = comm
        return comm.all_gather(shard, dim=1, phase=FORWARD)  # (B, T/tp, C) -> (B, T, C)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.reduce_scatter(grad, dim=1, phase=BACKWARD), None  # (B, T/tp, C)


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    """g̅: forward reduce-scatters the partial sums (B, T, C) of a row-parallel linear into this
    rank's summed sequence shard (B, T/tp, C); backward all-gathers the gradient to (B, T, C)."""

    @staticmethod
    def forward(ctx, partial, comm):
        ctx.comm = comm
        return comm.reduce_scatter(partial, dim=1, phase=FORWARD)  # (B, T, C) -> (B, T/tp, C)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_gather(grad.contiguous(), dim=1, phase=BACKWARD), None  # (B, T, C)


class GatheredColumnMatmul(torch.autograd.Function):
    """All-gather + column-parallel matmul that saves only the sequence shard (Megatron's SP
    linear). Forward: all-gather x (B, T/tp, C) -> (B, T, C), return x·Wᵀ (B, T, out/tp).
    Backward: all-gather x again (to form dW), reduce-scatter dx (B, T, C) -> (B, T/tp, C)."""

    @staticmethod
    def forward(ctx, shard, weight, comm):
        ctx.comm = comm
        ctx.save_for_backward(shard, weight)
        full = comm.all_gather(shard, dim=1, phase=FORWARD)  # (B, T, C)
        return full @ weight.t()  # (B, T, out/tp)

    @staticmethod
    def backward(ctx, grad):
        shard, weight = ctx.saved_tensors
        full = ctx.comm.all_gather(shard, dim=1, phase=BACKWARD)  # (B, T, C) re-gathered
        grad_weight = grad.reshape(-1, grad.size(-1)).t() @ full.reshape(-1, full.size(-1))
        grad_full = grad @ weight  # (B, T, C) this rank's part of dL/dx
        grad_shard = ctx.comm.reduce_scatter(grad_full, dim=1, phase=BACKWARD)  # (B, T/tp, C)
        return grad_shard, grad_weight, None
