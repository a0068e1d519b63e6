"""Data parallelism on uneven shares: weight each rank's gradient by its share, and stay exact.

Rank r takes b_r consecutive rows of the global batch of B rows (`parlab.heterogeneous.shares`;
Zhang et al., "HAP", EuroSys 2024, for why it should follow the device's speed):

    L = (1/B) Σ_rows ℓ = Σ_r (b_r/B) · L_r,     L_r = the mean over rank r's rows,

so rank r back-propagates (b_r/B)·L_r and one sum all-reduce gives the `single` run's gradient
for any shares (DDP's average would reweight the loss). A rank with no rows contributes zeros and
still joins the all-reduce and the update. In full: docs/heterogeneous.md,
`parlab.heterogeneous.weighted`.
"""

from __future__ import annotations

import torch

from parlab.engine.loop import Strategy, step_batch
from parlab.heterogeneous import shares as shares_mod


class WeightedShards(Strategy):
    """The default loop on rows [start_r, end_r) of each step's batch; the gradient is Σ_r (b_r/B)·∇L_r."""

    phase = "grad-sync"

    def __init__(self, ctx, model, optimizer, rows: list[int]):
        super().__init__(ctx, model, optimizer, shard=ctx.rank, shards=ctx.world_size,
                         holds_state=ctx.rank == 0)
        self.rows = list(rows)
        self.start, self.end = shares_mod.bounds(self.rows)[ctx.rank]
        self.weight = self.rows[ctx.rank] / sum(self.rows)  # b_r / B
        self.params = [p for p in model.parameters() if p.requires_grad]

    def batch(self, step: int):
        x, y = step_batch(self.ctx.cfg, step)  # (B, ...) the whole global batch
        return x[self.start:self.end], y[self.start:self.end]  # (b_r, ...) this rank's rows

    def forward_backward(self, step: int, batch) -> float:
        if self.end == self.start:
            return 0.0  # no rows: a zero gradient (sync) and a zero loss share
        with self.ctx.span("forward", step=step), self.meter:
            loss = self.loss(batch)  # mean over this rank's b_r rows
        with self.ctx.span("backward", step=step), self.meter:
            (loss * self.weight).backward()  # ∇ (b_r/B)·L_r
        return loss.item() * self.weight

    def sync(self, step: int) -> None:
        flat = self.flat_grad()  # (Ψ,) this rank's weighted gradient
        with self.ctx.ledger.label(phase=self.phase):
            self.ctx.comm.all_reduce(flat, op="sum")  # (Ψ,) Σ_r (b_r/B)·∇L_r = ∇L
        self.unflatten(flat)

    def flat_grad(self) -> torch.Tensor:
        return torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                          for p in self.params])  # (Ψ,) parameters in registration order

    def unflatten(self, flat: torch.Tensor) -> None:
        offset = 0
        for p in self.params:
            p.grad = flat[offset:offset + p.numel()].view_as(p).clone()  # (param shape,)
            offset += p.numel()

    def extras(self) -> dict:
        return {"rows": self.rows}
