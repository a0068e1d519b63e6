"""Compress in time: Local SGD (Stich, ICLR 2019) and DiLoCo (Douillard et al., 2023).

Local SGD: each replica trains H steps alone, then the parameters are averaged (one all-reduce of
Ψ: H× fewer bytes and latencies); with H = 1 and plain SGD, w - lr·mean gᵢ = mean(w - lr·gᵢ), so
it equals `single` (not with AdamW). DiLoCo: H inner AdamW steps, then the pseudo-gradient
Δ = θ_outer - mean θᵢ is all-reduced and an outer Nesterov-momentum SGD steps θ_outer (paper:
outer lr 0.7, momentum 0.9); with outer lr 1 and no momentum it is Local SGD (tested). Both
also average at the last step. In full: docs/compression.md, `parlab.compression.local_sgd`.
"""

from __future__ import annotations

import torch

from parlab.data_parallel.strategy import GradSync


def sync_steps(steps: int, sync_every: int) -> list[int]:
    """Steps after which the replicas are averaged: every H-th, and the last one."""
    return [s for s in range(steps) if (s + 1) % sync_every == 0 or s == steps - 1]


class LocalSGD(GradSync):
    """No gradient communication; parameters averaged after the steps of `sync_steps`."""

    phase = "param-sync"

    def __init__(self, ctx, model, sync_every: int):
        super().__init__(ctx, model)
        self.due = set(sync_steps(ctx.cfg.steps, sync_every))

    def after_backward(self) -> None:
        """Local steps: this rank's gradient, not averaged."""

    def average(self) -> torch.Tensor:
        """All replicas' mean parameters, flat."""
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])  # (Ψ,)
        with self.ctx.ledger.label(phase=self.phase):
            self.comm.all_reduce(flat, op="avg")  # (Ψ,) mean over ranks
        return flat

    def load(self, flat: torch.Tensor) -> None:
        with torch.no_grad():
            for p, piece in zip(self.params, flat.split([p.numel() for p in self.params])):
                p.copy_(piece.view_as(p))

    def after_step(self, step: int) -> None:
        if step in self.due:
            self.load(self.average())


class DiLoCo(LocalSGD):
    """Local SGD with an outer optimizer: Nesterov SGD on the averaged pseudo-gradient."""

    def __init__(self, ctx, model, sync_every: int, outer_lr: float, outer_momentum: float):
        super().__init__(ctx, model, sync_every)
        self.outer = [p.detach().clone() for p in self.params]  # θ_outer, same on every rank
        self.outer_optimizer = torch.optim.SGD(self.outer, lr=outer_lr, momentum=outer_momentum,
                                               nesterov=outer_momentum > 0)

    def after_step(self, step: int) -> None:
        if step not in self.due:
            return
        mean = self.average()  # (Ψ,) mean θᵢ
        for theta, piece in zip(self.outer, mean.split([t.numel() for t in self.outer])):
            theta.grad = theta - piece.view_as(theta)  # pseudo-gradient Δ = θ_outer - mean θᵢ
        self.outer_optimizer.step()
        self.load(torch.cat([t.reshape(-1) for t in self.outer]))  # every replica from θ_outer

    def comm_buffers(self):
        return self.outer + [t for s in self.outer_optimizer.state.values() for t in s.values()
                             if torch.is_tensor(t)]
