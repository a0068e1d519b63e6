"""PipeDream's weight stashing and PipeDream-2BW's double buffer: a pipeline that never flushes,
whose backwards use the weights their forwards saw.

PipeDream (Narayanan et al., SOSP 2019, §3.3) runs 1F1B without a flush and
updates after every micro-batch, keeping per micro-batch in flight the weight version its forward
used (stage s: min(p−s, m) versions). PipeDream-2BW (Narayanan et al., "Memory-Efficient
Pipeline-Parallel DNN Training", ICML 2021, §3.1) makes one version per m micro-batches: two
versions suffice. The stream's 1F1B schedule (`stream_schedule`) runs on the pipeline's one
executor in slices; `WeightStashing` is the stage strategy, and every backward records the
versions it used, so stashing is verified, not assumed.

Simplifications (the schedule is built for `steps` up front; memory metered on the first step):
docs/local_learning.md, `parlab.local_learning.stash`.
"""

from __future__ import annotations

import torch
from torch.func import functional_call

from parlab.local_learning.local_boundary import _accumulate
from parlab.pipeline.executor import PipelineExecutor, StageStrategy
from parlab.pipeline.schedules import COMPUTE, Schedule, _warm_then_alternate


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


def warmup(p: int, m: int, stage: int) -> int:
    """Warm-up forwards of `stage`: 1F1B's p−1−s, capped so at most m micro-batches are in flight."""
    return min(p - 1 - stage, m - 1)


def stream_schedule(p: int, m: int, steps: int) -> Schedule:
    """1F1B over the run's steps·m micro-batches with `warmup` forwards per stage (module docstring)."""
    return _warm_then_alternate("pipedream", p, steps * m, lambda r: warmup(p, m, r))


def step_slices(schedule: Schedule, rank: int, m: int, steps: int) -> list[list]:
    """`rank`'s lowered actions cut into steps + 1 slices: step k runs F(k·m) … F(k·m+m−1) and the
    backward after each (B(g − w) after F(g), w the warm-up); the last slice is the drain. A
    receive belongs to the compute action after it, a send to the one before it."""
    w, total = warmup(schedule.pp, m, rank), steps * m
    slices: list[list] = [[] for _ in range(steps + 1)]
    pending, k = [], 0
    for a in schedule.lowered()[rank]:
        if a.op.startswith("RECV"):
            pending.append(a)
            continue
        if a.op in COMPUTE:
            g = a.mb if a.op == "F" else a.mb + w  # the forward this action follows
            k = g // m if g < total else steps
            slices[k] += pending
            pending = []
        slices[k].append(a)
    return slices


class WeightStashing(StageStrategy):
    """The stage strategy of PipeDream (`group=1`: update after every micro-batch) and PipeDream-2BW
    (`group=m`: one update per step's m micro-batches)."""

    def __init__(self, ctx, stage, optimizer, group: int, meter, tie=None):
        self.ctx, self.optimizer, self.group = ctx, optimizer, group
        self.tie = tie  # () -> None: sum the tied embedding's gradients before an update
        self.stash = WeightStash(stage, meter)
        self.records: list[tuple] = []  # (g, forward version, backward version, live version)
        self.done_count = 0  # backwards finished

    def forward(self, s, g, stage, x, side_in):
        version = self.stash.take()
        return functional_call(stage, self.stash.weights(version), (x,)), version  # stashed weights

    def loss_root(self, loss, m: int):
        return loss / self.group  # 2BW: the mean over the group's micro-batches

    def backward(self, s, g, roots, grads, x, side_in, version):
        weights = self.stash.weights(version)
        inputs = ([x] if x.requires_grad else []) + [weights[n] for n in self.stash.names]
        got = torch.autograd.grad(roots, inputs, grads, allow_unused=True)
        live = [self.stash.live[n] for n in self.stash.names]
        _accumulate(live, got[1:] if x.requires_grad else got)
        self.records.append((g, version, version, self.stash.version))
        self.stash.release(version)
        return got[0] if x.requires_grad else None  # (mb, T, C)

    def done(self, step: int, s: int, g: int) -> None:
        """After the input gradient went down: every `group` backwards, one update."""
        self.done_count += 1
        if self.done_count % self.group == 0:
            if self.tie is not None:
                self.tie()
            with self.ctx.span("optimizer", step=step):
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            self.stash.version += 1


class StashedPipeline:
    """One rank of PipeDream / PipeDream-2BW: `stream_schedule` on the pipeline executor, one slice
    per step, with `WeightStashing` as the stage's strategy."""

    def __init__(self, ctx, pp: int, pp_rank: int, microbatches: int, group: int, steps: int,
                 stage, optimizer, comm_f, comm_b, boundary_shape, meter, tie=None):
        self.m, self.warmup = microbatches, warmup(pp, microbatches, pp_rank)
        schedule = stream_schedule(pp, microbatches, steps)
        self.slices = step_slices(schedule, pp_rank, microbatches, steps)
        self.strategy = WeightStashing(ctx, stage, optimizer, group, meter, tie)
        self.stash, self.records = self.strategy.stash, self.strategy.records
        self.executor = PipelineExecutor(ctx, schedule, pp_rank, {pp_rank: stage}, comm_f, comm_b,
                                         boundary_shape, meter, self.strategy)
        self._last = None  # the last step's (inputs, targets): the drain's row count

    def run_step(self, step: int, inputs: list, targets: list) -> list[float]:
        """The forwards of this step's micro-batches and the backwards 1F1B puts beside them."""
        self._last = (inputs, targets)
        return self.executor.run_step(step, inputs, targets, self.slices[step],
                                      first_mb=step * self.m)

    def drain(self, steps: int) -> None:
        """The backwards still owed after the last step's forwards."""
        self.executor.run_step(steps - 1, *self._last, self.slices[steps], first_mb=steps * self.m)
