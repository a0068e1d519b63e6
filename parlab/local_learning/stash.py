"""PipeDream's weight stashing and PipeDream-2BW's double buffer: a pipeline that never flushes,
whose backwards use the weights their forwards saw.

PipeDream (Harlap et al. / Narayanan et al., SOSP 2019, §3.3) runs 1F1B without a flush and
updates a stage after every micro-batch's backward, so the weights move while micro-batches are
in flight. A backward on different weights than its forward would compute a gradient of no
function at all; *weight stashing* keeps, per micro-batch in flight, the version its forward
used, and runs the backward with it. Stage s holds min(p−s, m) versions (`cost`).

PipeDream-2BW (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training", ICML 2021,
§3.1) accumulates the gradients of m micro-batches and makes one new version per m: with the
in-flight micro-batches never spanning more than two groups, two versions suffice — the one new
forwards use and the one older backwards still need.

Micro-batches form one stream over the run (g = step·m + i); stage s runs 1F1B over it with
min(p−1−s, m−1) warm-up forwards — the in-flight count capped at m, so m = 1 is plain model
parallelism with an update per batch: exactly the single process. A step runs the forwards of its
own micro-batches and the backwards 1F1B puts beside them; the last warm-up backwards of the run
drain in `drain`. Every backward records (micro-batch, version its forward used, version it used,
live version at that moment): stashing is verified from this record, not assumed.
"""

from __future__ import annotations

import torch
from torch.func import functional_call

from parlab.local_learning.local_boundary import _accumulate

FWD, BWD = "pp-fwd", "pp-bwd"


class WeightStash:
    """Weight versions of one stage kept for the backwards still to come, shared by the
    micro-batches whose forwards used the same version."""

    def __init__(self, stage, meter=None):
        self.stage = stage
        self.names = [n for n, _ in stage.named_parameters()]
        self.live = dict(stage.named_parameters())
        self.version = 0  # updates applied to the live weights
        self.kept: dict[int, list] = {}  # version -> [{name: tensor}, micro-batches using it]
        self.peak_versions = 0
        self.meter = meter

    def take(self) -> int:
        """Stash the live weights as the current version (once) for one more micro-batch."""
        if self.version not in self.kept:
            copy = {n: p.detach().clone().requires_grad_() for n, p in self.live.items()}
            if self.meter is not None:
                self.meter.exclude(copy.values())
            self.kept[self.version] = [copy, 0]
        self.kept[self.version][1] += 1
        self.peak_versions = max(self.peak_versions, len(self.kept))
        return self.version

    def weights(self, version: int) -> dict:
        return self.kept[version][0]

    def release(self, version: int) -> None:
        entry = self.kept[version]
        entry[1] -= 1
        if entry[1] == 0:
            del self.kept[version]

    def numel(self) -> int:
        return sum(p.numel() for p in self.live.values())


class StashedPipeline:
    """One rank of PipeDream (`group=1`: update after every micro-batch) or PipeDream-2BW
    (`group=m`: one update per step's m micro-batches)."""

    def __init__(self, ctx, pp: int, pp_rank: int, microbatches: int, group: int, stage,
                 optimizer, comm_f, comm_b, boundary_shape, meter, tie=None):
        self.ctx, self.p, self.r, self.m, self.group = ctx, pp, pp_rank, microbatches, group
        self.stage, self.optimizer = stage, optimizer
        self.comm_f, self.comm_b, self.boundary_shape, self.meter = comm_f, comm_b, boundary_shape, meter
        self.tie = tie  # () -> None: sum the tied embedding's gradients before an update
        self.warmup = min(pp - 1 - pp_rank, microbatches - 1)
        self.stash = WeightStash(stage, meter)
        self.saved: dict[int, tuple] = {}  # g -> (x, out, root, version)
        self.records: list[tuple] = []  # (g, forward version, backward version, live version)
        self.handles: list = []
        self.done = 0  # backwards run

    def forward(self, step: int, g: int, x, y):
        r, last = self.r, self.p - 1
        rows = x.size(0)
        if r > 0:
            x = self.comm_f.recv(torch.empty(self.boundary_shape(rows)), r - 1,
                                 phase=FWD).requires_grad_()  # (mb, T, C) from the stage below
        version = self.stash.take()
        loss = None
        with self.ctx.span("F", stage=r, mb=g, step=step), self.meter:
            out = functional_call(self.stage, self.stash.weights(version), (x,))  # stashed weights
            if r == last:
                loss = self.stage.loss(out, y)
                out = loss / self.group  # 2BW: the mean over the group's micro-batches
        if r < last:
            self.handles.append(self.comm_f.isend(out.detach(), r + 1, phase=FWD))  # (mb, T, C)
        self.saved[g] = (x, out, version)
        return loss.item() if loss is not None else None

    def backward(self, step: int, g: int):
        r, last = self.r, self.p - 1
        x, out, version = self.saved.pop(g)
        grad = None
        if r < last:
            grad = self.comm_b.recv(torch.empty(out.shape), r + 1, phase=BWD)  # (mb, T, C)
        weights = self.stash.weights(version)
        inputs = ([x] if r > 0 else []) + [weights[n] for n in self.stash.names]
        with self.ctx.span("B", stage=r, mb=g, step=step), self.meter:
            grads = torch.autograd.grad(out, inputs, grad, allow_unused=True)
        if r > 0:
            self.handles.append(self.comm_b.isend(grads[0], r - 1, phase=BWD))  # (mb, T, C)
        live = [self.stash.live[n] for n in self.stash.names]
        _accumulate(live, grads[1:] if r > 0 else grads)
        self.records.append((g, version, version, self.stash.version))
        self.stash.release(version)
        del x, out, grads
        self.done += 1
        if self.done % self.group == 0:
            if self.tie is not None:
                self.tie()
            with self.ctx.span("optimizer", step=step):
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            self.stash.version += 1

    def run_step(self, step: int, inputs: list, targets: list) -> list[float]:
        """The forwards of this step's micro-batches and the backwards 1F1B puts beside them."""
        losses = []
        for i in range(self.m):
            g = step * self.m + i
            loss = self.forward(step, g, inputs[i], targets[i])
            if loss is not None:
                losses.append(loss)
            if g >= self.warmup:
                self.backward(step, g - self.warmup)
        self.wait()
        return losses

    def drain(self, steps: int) -> None:
        """The backwards still owed after the last step's forwards."""
        total = steps * self.m
        for g in range(total - min(self.warmup, total), total):
            self.backward(steps - 1, g)
        self.wait()

    def wait(self) -> None:
        for h in self.handles:
            h.wait()
        self.handles = []
