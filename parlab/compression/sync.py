"""Compressed gradient sync: encode, all-gather the messages, decode and average; error feedback.

Each rank encodes its gradient (`parlab.compression.compressors`) into one uint8 buffer of fixed
length P, and one all-gather hands every rank all N buffers: (N-1)·P bytes sent per rank (ring),
against 2(N-1)/N·Ψ·4 for `ddp-naive`'s all-reduce. A sparse or quantized message cannot be summed
on the wire, hence the all-gather (Lin et al., DGC 2018; Alistarh et al., QSGD 2017); every rank
decodes in rank order, so replicas stay identical. Error feedback (Seide et al. 2014; Stich et
al. 2018; Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019): e ← (g + e) - C(g + e),
so Σ sent + e = Σ g. The reducer (`CompressedReducer`) also serves `apply_dp(..., compressor=)`:
docs/compression.md, `parlab.compression.sync`.
"""

from __future__ import annotations

import torch

from parlab.compression.compressors import seed_of
from parlab.data_parallel.reducers import GradientReducer
from parlab.data_parallel.strategy import GradSync


class ErrorFeedback:
    """One residual per tensor (or none when disabled): `corrected(i, g)` = g + e_i; `keep(i, c, s)`
    stores e_i = c - s, what the corrected gradient c had that the sent s lacks."""

    def __init__(self, params, enabled: bool):
        self.enabled = enabled
        self.residuals = [torch.zeros_like(p) for p in params] if enabled else []

    def corrected(self, index: int, grad: torch.Tensor) -> torch.Tensor:
        return grad + self.residuals[index] if self.enabled else grad

    def keep(self, index: int, corrected: torch.Tensor, sent: torch.Tensor) -> None:
        if self.enabled:
            self.residuals[index] = (corrected - sent).reshape(self.residuals[index].shape)


class CompressedReducer(GradientReducer):
    """After backward: compress each gradient (with error feedback), one all-gather, average.

    `seed`: the run's seed; every (step, tensor) draws its shared randomness from
    `seed_of(seed, step, index)`. `step` counts the syncs from 0 (a loop that knows its step sets
    it before `after_backward`)."""

    def __init__(self, comm, params, compressor, error_feedback: bool, seed: int = 0,
                 phase: str | None = None, algo: str = "gloo"):
        super().__init__(comm, params, phase, algo)
        self.compressor, self.seed_base, self.step = compressor, seed, 0
        self.feedback = ErrorFeedback(self.params, error_feedback)
        self.numels = [p.numel() for p in self.params]
        self.sizes = [compressor.payload_bytes(n) for n in self.numels]  # bytes per tensor

    def seed(self, index: int) -> int:
        return seed_of(self.seed_base, self.step, index)

    def after_backward(self) -> None:
        messages = []
        for i, p in enumerate(self.params):
            if p.grad is None:  # no gradient on this rank this step: it contributes zeros
                p.grad = torch.zeros_like(p)
            corrected = self.feedback.corrected(i, p.grad)  # (param shape,)
            message = self.compressor.encode(corrected, self.seed(i), self.comm.rank)  # (P_i,) uint8
            if self.feedback.enabled:
                sent = self.compressor.decode(message, p.numel(), self.seed(i)).view_as(p)
                self.feedback.keep(i, corrected, sent)
            messages.append(message)
        mine = torch.cat(messages)  # (P,) uint8, P = Σ P_i
        everyone = self.comm.all_gather(mine, algo=self.algo,
                                        phase=self.phase)  # (N·P,) uint8, rank r's at [r·P, (r+1)·P)
        for i, p in enumerate(self.params):
            total = torch.zeros(p.numel())  # (n_i,) summed in rank order on every rank
            for rank in range(self.comm.size):
                start = rank * mine.numel() + sum(self.sizes[:i])
                total += self.compressor.decode(everyone[start:start + self.sizes[i]], p.numel(),
                                                self.seed(i))
            p.grad.copy_((total / self.comm.size).view_as(p))
        self.step += 1

    def buffers(self):
        return self.feedback.residuals


class ReducerSync(GradSync):
    """Chapter 08's strategy around one of its reducers (`self.reducer`, set by the subclass) over
    the world: the reducer follows the loop's step (its seeds and warm starts do), runs after
    backward and owns the communication buffers."""

    reducer = None

    def sync(self, step: int) -> None:
        self.reducer.step = step
        super().sync(step)

    def after_backward(self) -> None:
        # encoding and decoding are compute (a compressor's work is not free): a compute span,
        # priced on a paced clock like any other, which each message it sends interrupts
        with self.ctx.span("compress"):
            self.reducer.after_backward()

    def comm_buffers(self):
        return self.reducer.buffers()


class CompressedSync(ReducerSync):
    """Chapter 08's strategy around a `CompressedReducer` over the world."""

    def __init__(self, ctx, model, compressor, error_feedback: bool):
        super().__init__(ctx, model)
        self.reducer = CompressedReducer(self.comm, self.params, compressor, error_feedback,
                                         seed=ctx.cfg.seed)
