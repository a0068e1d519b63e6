"""The data-parallel training loop of chapter 01, with gradient accumulation and pluggable sync.

Every rank takes rows [r·B/N, (r+1)·B/N) of the global batch and splits them into `accum_steps`
micro-batches. Each micro-batch's mean loss is divided by accum_steps before backward, so the
gradients summed over micro-batches are those of the rank's mean loss; averaging over ranks then
gives the gradient of the global mean loss — the single-process run's gradient, exactly.
Communication happens only in the last micro-step's backward: the earlier ones just accumulate
into `.grad` (PyTorch's `DistributedDataParallel.no_sync()`; Goyal et al., "Accurate, Large
Minibatch SGD", 2017, for why the global batch is what matters).

*When* gradients move is the whole chapter, so the loop leaves it to a `GradSync` strategy:
`before_micro(last)` before each micro-step's forward, `after_backward()` once the last backward
has run (start or finish the communication), `update()` for the optimizer step, `finish()` after
the final step (for strategies that defer the update into the next forward, as DeAR does).
"""

from __future__ import annotations

import time

import torch

from parlab.core.memory import ActivationMeter, model_memory, optimizer_state_tensors, tensor_bytes
from parlab.engine.loop import make_optimizer, state_of, step_batch


class ComputeSpan:
    """A compute span on the timeline that can be paused while the rank blocks inside it.

    A deferred update (DeAR, priority) waits for communication *inside* the next forward; pausing
    the forward's span there keeps the timeline honest: compute segments, then the wait, then
    the optimizer, then compute again.
    """

    def __init__(self, timeline, name: str, **args):
        self.timeline, self.name, self.args = timeline, name, args
        self.t0 = None

    def resume(self) -> None:
        self.t0 = time.perf_counter()

    def pause(self) -> None:
        if self.t0 is not None:
            self.timeline.add("compute", self.name, self.t0, time.perf_counter(), **self.args)
            self.t0 = None

    def __enter__(self):
        self.resume()
        return self

    def __exit__(self, *exc):
        self.pause()
        return False


class GradSync:
    """Base strategy: one optimizer stepped right after backward; subclasses move the gradients."""

    phase = "grad-sync"

    def __init__(self, ctx, model: torch.nn.Module):
        self.ctx, self.model = ctx, model
        self.forward_span: ComputeSpan | None = None  # the forward running now (see ComputeSpan)
        self.comm = ctx.comm
        self.params = list(model.parameters())
        self.optimizers = [make_optimizer(self.params, ctx.cfg)]
        self.last_micro = True
        self.peak_memory: dict[str, int] = {}

    def before_micro(self, last: bool) -> None:
        """Called before each micro-step's forward; `last`: this backward must communicate."""
        self.last_micro = last

    def after_backward(self) -> None:
        """The last micro-step's backward is done: every rank's grads must end up averaged."""

    def update(self) -> None:
        with self.ctx.span("optimizer", step=self.ctx.ledger.labels.get("step")):
            for optimizer in self.optimizers:
                optimizer.step()
            self.observe_memory()  # gradients and optimizer state both alive: the peak
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)

    def finish(self) -> None:
        """After the last step (strategies with a deferred update apply it here)."""

    def comm_buffers(self) -> list[torch.Tensor]:
        return []

    def observe_memory(self) -> None:
        """Keep, per kind, the most bytes seen so far (`peak_memory`)."""
        for kind, nbytes in self.memory().items():
            self.peak_memory[kind] = max(self.peak_memory.get(kind, 0), nbytes)

    def memory(self) -> dict:
        """Measured bytes held now: params, grads, optimizer state, communication buffers."""
        memory = model_memory(self.params, None)
        memory["optimizer"] = tensor_bytes(t for opt in self.optimizers
                                           for t in optimizer_state_tensors(opt))
        memory["comm_buffers"] = tensor_bytes(self.comm_buffers())
        return memory


def micro_batches(batch, accum_steps: int):
    """Split a rank's rows into `accum_steps` equal micro-batches (divisibility is validated)."""
    return list(zip(*(t.chunk(accum_steps) for t in batch)))  # accum × ((B/N/accum, ...), ...)


def train(ctx, model: torch.nn.Module, sync: GradSync, dp_rank: int, dp_size: int,
          accum_steps: int = 1) -> dict:
    """Train `ctx.cfg.steps` steps; return the worker output (loss shares, state, memory)."""
    meter = ActivationMeter(exclude=model.parameters())
    losses = []
    for step in range(ctx.cfg.steps):
        with ctx.step(step):
            batch = step_batch(ctx.cfg, step, dp_rank, dp_size)  # (B/N, ...) rows of this rank
            total = 0.0
            for micro, (x, y) in enumerate(micro_batches(batch, accum_steps)):
                sync.before_micro(last=micro == accum_steps - 1)
                sync.forward_span = ComputeSpan(ctx.timeline, "forward", step=step, micro=micro)
                with sync.forward_span, meter:
                    loss = model.loss(x, y)
                sync.forward_span = None
                with ctx.span("backward", step=step, micro=micro), meter, \
                        ctx.ledger.label(phase=sync.phase):
                    (loss / accum_steps).backward()
                total += loss.item()
            with ctx.ledger.label(phase=sync.phase):
                sync.after_backward()
            sync.update()
            losses.append(total / accum_steps / dp_size)
    with ctx.ledger.label(phase=sync.phase):
        sync.finish()
    sync.observe_memory()
    memory = dict(sync.peak_memory)
    memory["activations"] = meter.peak
    return {"losses": losses, "state": state_of(model) if dp_rank == 0 else None,
            "memory": memory}
