"""The communication of expert parallelism, as autograd Functions (GShard, Lepikhin et al. 2020, §2.2).

With E experts sharded over an ep group: Dispatch (forward: an all-to-all with uneven splits,
known in advance from the routing plan, sends each rank's tokens to their experts' ranks;
backward: the reverse) and Combine (the experts' outputs back home; backward: the reverse). The
naive alternative moves every token everywhere: GatherTokens (all-gather forward, reduce-scatter
backward) and ScatterOutputs (reduce-scatter forward, all-gather backward). Every Function takes
its `Comm`; nothing global. Ledger phases name the pattern and direction. Each Function's
directions: docs/expert_parallel.md, `parlab.expert_parallel.ops`.
"""

from __future__ import annotations

import torch

from parlab.core.comm import Comm


def exchange_rows(comm: Comm, rows, send_counts: list[int], recv_counts: list[int], phase: str):
    """rows (Σ send, C) grouped by destination -> (Σ recv, C) grouped by source (one all-to-all)."""
    width = rows.size(1)
    pieces = list(rows.contiguous().split(send_counts))  # ep × (send_j, C)
    shapes = [(n, width) for n in recv_counts]
    return torch.cat(comm.all_to_all(pieces, output_shapes=shapes, phase=phase))  # (Σ recv, C)


class Dispatch(torch.autograd.Function):
    """Forward: rows (A, C) sorted by expert (so by owner) -> the rows this rank's experts
    receive (R, C), grouped by source; backward: their gradients (R, C) -> (A, C) back home."""

    @staticmethod
    def forward(ctx, rows, send_counts, recv_counts, comm):
        ctx.comm, ctx.send, ctx.recv = comm, send_counts, recv_counts
        return exchange_rows(comm, rows, send_counts, recv_counts, "dispatch")  # (R, C)

    @staticmethod
    def backward(ctx, grad):
        home = exchange_rows(ctx.comm, grad, ctx.recv, ctx.send, "dispatch-backward")  # (A, C)
        return home, None, None, None


class Combine(torch.autograd.Function):
    """Forward: expert outputs (R, C), grouped by source -> each source's rows (A, C) in the order
    it dispatched them; backward: the output gradients (A, C) -> the experts' ranks (R, C)."""

    @staticmethod
    def forward(ctx, rows, send_counts, recv_counts, comm):
        ctx.comm, ctx.send, ctx.recv = comm, send_counts, recv_counts
        return exchange_rows(comm, rows, send_counts, recv_counts, "combine")  # (A, C)

    @staticmethod
    def backward(ctx, grad):
        back = exchange_rows(ctx.comm, grad, ctx.recv, ctx.send, "combine-backward")  # (R, C)
        return back, None, None, None


class GatherTokens(torch.autograd.Function):
    """Forward: all-gather (N/ep, D) -> (N, D) over the ep group; backward: reduce-scatter of the
    gradient (N, D) -> (N/ep, D), the sum of what every rank's experts did with these rows."""

    @staticmethod
    def forward(ctx, rows, comm):
        ctx.comm = comm
        return comm.all_gather(rows.contiguous(), dim=0, phase="gather")  # (N, D)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.reduce_scatter(grad.contiguous(), dim=0, phase="gather-backward"), None


class ScatterOutputs(torch.autograd.Function):
    """Forward: reduce-scatter of partial outputs (N, C) -> this rank's rows summed over every
    rank's experts (N/ep, C); backward: all-gather of their gradient (N/ep, C) -> (N, C)."""

    @staticmethod
    def forward(ctx, partial, comm):
        ctx.comm = comm
        return comm.reduce_scatter(partial.contiguous(), dim=0, phase="scatter")  # (N/ep, C)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_gather(grad.contiguous(), dim=0, phase="scatter-backward"), None


def gather_counts(world: Comm, counts):
    """(k, E) this rank's assignment counts -> (W, k, E) every rank's, in rank (= token) order;
    integers, no gradient: the routing plan every rank derives its splits from."""
    return world.all_gather(counts.unsqueeze(0).contiguous(), dim=0, phase="counts")  # (W, k, E)
