"""Run one rank's lowered action list for one training step: forwards, backwards, weight
gradients, and the activations and gradients that cross ranks through `parlab.core.comm.Comm`.

The executor is a loop over the list that `Schedule.lowered()` produced — the same list the
validator simulated and `cost` drew — so what runs is what was checked. Receives block (that wait
*is* the pipeline bubble, visible in the timeline); sends are non-blocking and waited at the end of
the step, which is what makes the lowered lists deadlock-free (`validate.simulate` proves it for
each schedule). Activations travel on one communicator and gradients on another, so each kind is a
FIFO channel between two ranks, matched in order.

Split backward (zero bubble: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §2): every
`nn.Linear` Y = X·Wᵀ (+b) has a backward in two parts, B: ∂L/∂X = ∂L/∂Y·W (on the critical path:
the previous stage waits for it) and W: ∂L/∂W = ∂L/∂Yᵀ·X, ∂L/∂b = Σ ∂L/∂Y (needed only by the
optimizer). B asks autograd for the gradients of the stage input and of every linear output
(`torch.autograd.grad`, which skips the weight-gradient matmuls nobody asked for) and for the small
non-linear parameters (LayerNorm, embeddings, the tied head), and stashes (X, ∂L/∂Y); W turns the
stash into weight gradients with one matmul per linear. Both are exact: the same products autograd
would form.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from parlab.core.precision import compute_dtype
from parlab.pipeline.schedules import Schedule


class LinearTape:
    """Records (linear, input X, output Y) of every nn.Linear call in a stage while entered."""

    def __init__(self, stage: nn.Module):
        self.linears = [m for m in stage.modules() if isinstance(m, nn.Linear)]
        self.records: list[tuple] = []
        self._handles = []

    def __enter__(self):
        def hook(module, args, output):
            self.records.append((module, args[0], output))
        self._handles = [m.register_forward_hook(hook) for m in self.linears]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        return False


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    if param.grad is None:
        param.grad = grad.detach().clone()
    else:
        param.grad.add_(grad)


def input_backward(root, grad_out, x, tape: LinearTape, stage: nn.Module):
    """B: gradient of the stage input; stashes (linear, X, ∂L/∂Y) for W. Returns ∂L/∂x or None."""
    linear_params = {id(p) for m in tape.linears for p in m.parameters()}
    small = [p for p in stage.parameters() if id(p) not in linear_params]
    outputs = [y for _, _, y in tape.records]
    wanted = ([x] if x.requires_grad else []) + outputs + small
    grads = torch.autograd.grad(root, wanted, grad_outputs=grad_out, allow_unused=True)
    offset = 1 if x.requires_grad else 0
    for p, g in zip(small, grads[offset + len(outputs):]):
        if g is not None:
            _accumulate(p, g)
    stash = [(m, xin.detach(), g) for (m, xin, _), g in zip(tape.records, grads[offset:])
             if g is not None]
    return (grads[0] if x.requires_grad else None), stash


def weight_backward(stash) -> None:
    """W: ∂L/∂W = ∂L/∂Yᵀ·X and ∂L/∂b = Σ ∂L/∂Y for every stashed linear."""
    for linear, x, dy in stash:
        dy2 = dy.reshape(-1, linear.out_features)  # (rows, out)
        _accumulate(linear.weight, dy2.t() @ x.reshape(-1, linear.in_features))  # (out, in)
        if linear.bias is not None:
            _accumulate(linear.bias, dy2.sum(0))  # (out,)


class PipelineExecutor:
    """Executes this rank's lowered actions of `schedule` on its `stages` ({stage id: Stage})."""

    def __init__(self, ctx, schedule: Schedule, pp_rank: int, stages: dict, comm_f, comm_b,
                 boundary_shape, meter):
        self.ctx, self.schedule, self.pp_rank, self.stages = ctx, schedule, pp_rank, stages
        self.actions = schedule.lowered()[pp_rank]
        self.comm_f, self.comm_b = comm_f, comm_b
        self.boundary_shape = boundary_shape  # rows -> activation shape between stages
        # activations between stages travel in the compute dtype (16 bits in mixed precision)
        self.dtype = compute_dtype(getattr(ctx.cfg, "precision", "fp32"))
        self.meter = meter
        self.in_flight_peak = 0  # most micro-batches whose activations were alive at once
        self.microbatch_bytes: dict[int, int] = {}  # stage -> activation bytes one F saved

    def run_step(self, step: int, inputs: list, targets: list) -> list[float]:
        """Run the step's actions; return the last stage's per-micro-batch losses (else [])."""
        sched, last = self.schedule, self.schedule.stages - 1
        m = sched.microbatches
        box: dict[tuple, torch.Tensor] = {}  # ("F"|"B", stage, mb) -> arrived input / gradient
        saved: dict[tuple, tuple] = {}  # (stage, mb) -> (stage input, output or loss/m)
        grad_in: dict[tuple, torch.Tensor] = {}  # (stage, mb) -> ∂L/∂input to send back
        stash: dict[tuple, list] = {}  # (stage, mb) -> what W needs
        sends, losses, in_flight = [], [], 0
        rows = inputs[0].size(0)
        for a in self.actions:
            s, i = a.stage, a.mb
            if a.op == "RECV_F":
                buf = torch.empty(self.boundary_shape(rows), dtype=self.dtype)  # (mb, T, C)
                box[("F", s, i)] = self.comm_f.recv(buf, sched.rank_of(s - 1), phase="pp-fwd")
            elif a.op == "RECV_B":
                buf = torch.empty(self.boundary_shape(rows), dtype=self.dtype)  # (mb, T, C)
                box[("B", s, i)] = self.comm_b.recv(buf, sched.rank_of(s + 1), phase="pp-bwd")
            elif a.op == "SEND_F":
                out = saved[(s, i)][1].detach()  # (mb, T, C)
                sends.append(self.comm_f.isend(out, sched.rank_of(s + 1), phase="pp-fwd"))
            elif a.op == "SEND_B":
                g = grad_in.pop((s, i))  # (mb, T, C)
                sends.append(self.comm_b.isend(g, sched.rank_of(s - 1), phase="pp-bwd"))
            elif a.op == "F":
                stage = self.stages[s]
                x = inputs[i] if s == 0 else box.pop(("F", s, i)).detach().requires_grad_()
                before = self.meter.current
                with self.ctx.span("F", stage=s, mb=i, step=step), self.meter:
                    if sched.split_backward:
                        with LinearTape(stage) as tape:
                            out = stage(x)
                    else:
                        out, tape = stage(x), None
                    if s == last:
                        loss = stage.loss(out, targets[i])
                        losses.append(loss.item())
                        out = loss / m  # the global loss is the mean over equal micro-batches
                self.microbatch_bytes.setdefault(s, self.meter.current - before)
                saved[(s, i)] = (x, out, tape)
                if s < last and sched.rank_of(s + 1) == self.pp_rank:
                    box[("F", s + 1, i)] = out.detach()
                in_flight += 1
                self.in_flight_peak = max(self.in_flight_peak, in_flight)
            elif a.op == "B":
                x, out, tape = saved.pop((s, i))
                g = None if s == last else box.pop(("B", s, i))  # (mb, T, C) or None: the loss
                with self.ctx.span("B", stage=s, mb=i, step=step), self.meter:
                    if sched.split_backward:
                        dx, stash[(s, i)] = input_backward(out, g, x, tape, self.stages[s])
                        for _, xin, dy in stash[(s, i)]:  # the stash holds activations until W
                            self.meter.track(xin, dy)
                    else:
                        torch.autograd.backward(out, g)
                        dx = x.grad if s > 0 else None
                        in_flight -= 1
                del out, tape
                if s > 0:
                    if sched.rank_of(s - 1) == self.pp_rank:
                        box[("B", s - 1, i)] = dx
                    else:
                        grad_in[(s, i)] = dx
            elif a.op == "W":
                with self.ctx.span("W", stage=s, mb=i, step=step):
                    weight_backward(stash.pop((s, i)))
                in_flight -= 1
        for handle in sends:
            handle.wait()
        return losses
