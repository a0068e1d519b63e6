"""PowerSGD (Vogels, Karimireddy & Jaggi, NeurIPS 2019): a rank-r gradient from one power step.

Each gradient matrix M (n×m; a conv/embedding reshaped to (shape[0], -1)) is approximated as
P·Qᵀ with P (n×r), Q (m×r), by one step of subspace iteration shared across ranks:

    P = M·Q            all-reduce(P) average → P = mean of the ranks' M·Q = M̄·Q   (linear!)
    P ← orthonormal(P)   (QR; every rank holds the same P̄, so the same basis)
    Q = Mᵀ·P           all-reduce(Q) average → M̄ᵀ·P
    M̄ ≈ P·Qᵀ

2(N-1)/N·(n + m)·r·4 bytes per matrix instead of 2(N-1)/N·n·m·4; vectors are all-reduced whole;
Q warm-starts the next step; error feedback keeps e = (M + e) - P·Qᵀ. At full rank it equals the
plain all-reduce up to rounding (tested against `single`). The reducer (`PowerSGDReducer`) also
serves `apply_dp(..., compressor="powersgd")`: docs/compression.md, `parlab.compression.powersgd`.
"""

from __future__ import annotations

import torch

from parlab.compression.compressors import generator
from parlab.compression.sync import ErrorFeedback, ReducerSync
from parlab.data_parallel.reducers import GradientReducer


def factor_rank(shape, rank: int) -> int:
    """r used for a parameter of `shape`: min(rank, n, m); 0 for a vector (sent uncompressed)."""
    if len(shape) < 2:
        return 0
    rows, cols = shape[0], int(torch.Size(shape[1:]).numel())
    return min(rank, rows, cols)


def orthonormalize(matrix: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning (at least) `matrix`'s columns: the Q of a reduced QR."""
    return torch.linalg.qr(matrix, mode="reduced").Q  # (n, r)


class PowerSGDReducer(GradientReducer):
    """After backward: one all-reduce of every P (and the vectors), one of every Q (chapter 01's
    `GradientReducer` interface: no loop). `seed`: the run's seed (the Gaussian Q's); `step`
    counts the syncs from 0 (a loop that knows its step sets it before `after_backward`)."""

    def __init__(self, comm, params, rank: int, error_feedback: bool, warm_start: bool,
                 seed: int = 0, phase: str | None = None, algo: str = "gloo"):
        super().__init__(comm, params, phase, algo)
        self.ranks = [factor_rank(p.shape, rank) for p in self.params]
        self.matrices = [i for i, r in enumerate(self.ranks) if r > 0]
        self.vectors = [i for i, r in enumerate(self.ranks) if r == 0]
        self.feedback = ErrorFeedback(self.params, error_feedback)
        self.warm_start, self.seed, self.step = warm_start, seed, 0
        self.qs = {i: self.initial_q(i, step=0) for i in self.matrices}

    def initial_q(self, index: int, step: int) -> torch.Tensor:
        """Gaussian Q (m×r), the same on every rank (a generator seeded by run seed, step, tensor)."""
        p = self.params[index]
        cols = p.numel() // p.shape[0]
        return torch.randn(cols, self.ranks[index], generator=generator(self.seed, step, index))

    def after_backward(self) -> None:
        if not self.warm_start and self.step > 0:
            self.qs = {i: self.initial_q(i, self.step) for i in self.matrices}
        for p in self.params:
            if p.grad is None:  # no gradient on this rank this step: it contributes zeros
                p.grad = torch.zeros_like(p)
        m = {}
        for i in self.matrices:
            grad = self.params[i].grad
            m[i] = self.feedback.corrected(i, grad).reshape(grad.shape[0], -1)  # (n, m)
        ps = [m[i] @ self.qs[i] for i in self.matrices]  # (n, r) each
        vectors = [self.params[i].grad.reshape(-1) for i in self.vectors]  # (n_v,) each
        first = torch.cat([t.reshape(-1) for t in ps] + vectors)  # (Σ n·r + Σ n_v,)
        self.comm.all_reduce(first, op="avg", algo=self.algo,
                             phase=self.phase)  # (Σ n·r + Σ n_v,) averaged over ranks
        pieces = iter(first.split([t.numel() for t in ps] + [v.numel() for v in vectors]))
        ps = {i: orthonormalize(next(pieces).view_as(p)) for i, p in zip(self.matrices, ps)}
        for i in self.vectors:
            self.params[i].grad.copy_(next(pieces).view_as(self.params[i].grad))
        qs = [m[i].T @ ps[i] for i in self.matrices]  # (m, r) each
        second = torch.cat([q.reshape(-1) for q in qs])  # (Σ m·r,)
        self.comm.all_reduce(second, op="avg", algo=self.algo,
                             phase=self.phase)  # (Σ m·r,) averaged: M̄ᵀ·P
        for i, q in zip(self.matrices, second.split([q.numel() for q in qs])):
            q = q.view(-1, self.ranks[i])  # (m, r)
            approx = ps[i] @ q.T  # (n, m) = P·Qᵀ ≈ M̄
            self.feedback.keep(i, m[i], approx)
            self.params[i].grad.copy_(approx.view_as(self.params[i].grad))
            self.qs[i] = q
        self.step += 1

    def buffers(self):
        return self.feedback.residuals + list(self.qs.values())


class PowerSGDSync(ReducerSync):
    """Chapter 08's strategy around a `PowerSGDReducer` over the world."""

    def __init__(self, ctx, model, rank: int, error_feedback: bool, warm_start: bool):
        super().__init__(ctx, model)
        self.reducer = PowerSGDReducer(self.comm, self.params, rank, error_feedback, warm_start,
                                       seed=ctx.cfg.seed)
