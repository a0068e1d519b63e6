"""The data-parallel strategy of chapter 01, with gradient accumulation and pluggable sync.

Every rank takes rows [r·B/N, (r+1)·B/N) of the global batch and splits them into `accum_steps`
micro-batches. Each micro-batch's mean loss is divided by accum_steps before backward, so the
gradients summed over micro-batches are those of the rank's mean loss; averaging over ranks then
gives the gradient of the global mean loss — the single-process run's gradient, exactly.
Communication happens only in the last micro-step's backward: the earlier ones just accumulate
into `.grad` (PyTorch's `DistributedDataParallel.no_sync()`; Goyal et al., "Accurate, Large
Minibatch SGD", 2017, for why the global batch is what matters).

*When* gradients move is the whole chapter, so the one training loop (`parlab.engine.loop`) runs
a `GradSync` strategy whose subclasses differ only in that. The naive, bucketed and overlapped
ones hand it to a reducer (`parlab.data_parallel.reducers`: the buckets, the hooks, the
collectives, no loop), which is also what `parlab.data_parallel.apply.apply_dp` attaches to a
composed model's dp × cp group.
"""

from __future__ import annotations

import time

import torch

from parlab.core import speeds
from parlab.core.memory import model_memory, optimizer_state_tensors, tensor_bytes
from parlab.engine.loop import Strategy, make_optimizer, micro_batches


class ComputeSpan:
    """A compute span on the timeline that can be paused while the rank blocks inside it.

    A deferred update (DeAR, priority) waits for communication *inside* the next forward; pausing
    the forward's span there keeps the timeline honest: compute segments, then the wait, then
    the optimizer, then compute again.

    `speed` (`parlab.core.speeds`, the run's `speeds=`): each segment lasts its CPU time ÷ speed,
    as every compute span of a slow rank does; on a paced clock each segment is a paced compute
    span (`parlab.core.clock`), as every other span is.
    """

    def __init__(self, timeline, name: str, speed: float = 1.0, **args):
        self.timeline, self.name, self.speed, self.args = timeline, name, speed, args
        self.t0 = self.cpu0 = None

    def resume(self) -> None:
        self.t0, self.cpu0 = self.timeline.now(), time.thread_time()
        if self.timeline.pacer is not None:  # a paced run: the clock's pacer times the segment
            self.timeline.pacer.enter()

    def pause(self) -> None:
        if self.t0 is not None:
            end = None
            if self.timeline.pacer is not None:
                end = self.timeline.pacer.exit()  # sleeps to the segment's paced end (speed incl.)
            elif self.speed != 1.0:
                speeds.sleep_until(self.t0 + (time.thread_time() - self.cpu0) / self.speed)
            self.timeline.add("compute", self.name, self.t0,
                              self.timeline.now() if end is None else end, **self.args)
            self.t0 = None

    def __enter__(self):
        self.resume()
        return self

    def __exit__(self, *exc):
        self.pause()
        return False


class GradSync(Strategy):
    """Base data-parallel strategy: the rank's rows in `accum_steps` micro-batches, one optimizer
    stepped right after backward; subclasses decide when and how the gradients move.

    Subclass hooks: `before_micro(last)` before each micro-step's forward, `after_backward()`
    once the last backward has run (start or finish the communication), `update(step)` for the
    optimizer step, `finish()` after the final step (for strategies that defer the update into
    the next forward, as DeAR does).
    """

    phase = "grad-sync"

    def __init__(self, ctx, model: torch.nn.Module, accum_steps: int | None = None,
                 optimizer: torch.optim.Optimizer | None = None):
        # frozen parameters (requires_grad=False) are not trained: no hook, no bucket, no bytes,
        # and no optimizer state (so no weight decay creeps into them)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizers = [optimizer or make_optimizer(self.params, ctx.cfg)]
        super().__init__(ctx, model, self.optimizers[0], shard=ctx.rank, shards=ctx.world_size)
        self.comm = ctx.comm
        self.accum_steps = accum_steps or ctx.cfg.options.get("accum_steps", 1)
        self.forward_span: ComputeSpan | None = None  # the forward running now (see ComputeSpan)
        self.last_micro = True
        self.speed = speeds.speed_of(ctx.cfg, ctx.rank)  # an emulated device's speed (speeds=)

    def forward_backward(self, step: int, batch) -> float:
        ctx, total = self.ctx, 0.0
        for micro, (x, y) in enumerate(micro_batches(batch, self.accum_steps)):
            self.before_micro(last=micro == self.accum_steps - 1)
            self.forward_span = ComputeSpan(ctx.timeline, "forward", self.speed, step=step,
                                            micro=micro)
            with self.forward_span, self.meter:
                loss = self.model.loss(x, y)  # (B/N/accum, ...) rows of this micro-step
            self.forward_span = None
            with ctx.span("backward", step=step, micro=micro), self.meter, \
                    ctx.ledger.label(phase=self.phase):
                (loss / self.accum_steps).backward()
            total += loss.item()
        return total / self.accum_steps / self.shards

    def sync(self, step: int) -> None:
        with self.ctx.ledger.label(phase=self.phase):
            self.after_backward()

    def set_optimizers(self, optimizers: list) -> None:
        """Replace the optimizers (layer-wise deferred updates: one per group); in mixed precision
        each gets its fp32 master weights (`Strategy.mixed_optimizer`)."""
        self.optimizers = optimizers
        if self.masters:
            self.masters = []
            for optimizer in optimizers:
                self.mixed_optimizer(optimizer)

    def before_micro(self, last: bool) -> None:
        """Called before each micro-step's forward; `last`: this backward must communicate."""
        self.last_micro = last

    def after_backward(self) -> None:
        """The last micro-step's backward is done: every rank's grads must end up averaged."""

    def update(self, step: int) -> None:
        with self.ctx.span("optimizer", step=step):
            for optimizer in self.optimizers:
                optimizer.step()
            self.observe_memory()  # gradients and optimizer state both alive: the peak
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)

    def finish(self) -> None:
        with self.ctx.ledger.label(phase=self.phase):
            self.flush()

    def flush(self) -> None:
        """After the last step: apply a deferred update (DeAR, priority)."""

    def comm_buffers(self) -> list[torch.Tensor]:
        return []

    def memory(self) -> dict:
        """Measured bytes held now: params, grads, optimizer state, communication buffers."""
        memory = model_memory(self.model.parameters(), None)
        memory["optimizer"] = tensor_bytes(t for opt in self.optimizers
                                           for t in optimizer_state_tensors(opt))
        memory["comm_buffers"] = tensor_bytes(self.comm_buffers())
        return memory
