"""One rank's training step of `local` and `interlocking`: activations go up, gradient
components come down, none further than `depth` boundaries.

Stage r works through `Route.order(r, m)` (see `routes`):

- F i: receive micro-batch i's activation from stage r−1 (or take the input), run the stage and
  its loss — the true loss on the last stage, w·(auxiliary loss) elsewhere — and send the
  activation up. If the message down carries only this loss ("early"), differentiate it now and
  send the input gradient down at once: the stage below waits one forward, not a pipeline.
- B i: receive the gradient components micro-batch i's output got from above (one per loss still
  within reach), then backward: every component trains this stage; those with depth left are
  differentiated with respect to the input, one by one, and sent down stacked.

Depth 0 (`local`, Belilovsky et al., ICML 2020) sends nothing down: no stage ever waits for the
stages above it, only for its input. Activations and gradients travel on two communicators, so
each is a FIFO channel between neighbours, matched in micro-batch order; sends are asynchronous
and waited at the end of the step, which bounds how far a stage runs ahead of the one above
(one step of activations in flight). Compute spans are named F, B (a pass that produces a
gradient to send) and W (a pass that only trains this stage), as in chapter 04, so its timeline
tools apply.
"""

from __future__ import annotations

import torch

from parlab.local_learning.local_boundary import LocalBoundary, backward_roots
from parlab.local_learning.routes import Route

FWD, BWD = "pp-fwd", "pp-bwd"


class InterlockExecutor:
    def __init__(self, ctx, route: Route, pp_rank: int, stage, head, params: list, comm_f, comm_b,
                 boundary_shape, meter):
        self.ctx, self.route, self.r = ctx, route, pp_rank
        self.stage, self.head, self.params = stage, head, params
        self.comm_f, self.comm_b = comm_f, comm_b
        self.boundary_shape = boundary_shape  # rows -> activation shape between stages
        self.meter = meter

    def _pass(self, name, step, i, x, send, keep):
        with self.ctx.span(name, stage=self.r, mb=i, step=step), self.meter:
            return backward_roots(x, send, keep, self.params)

    def run_step(self, step: int, inputs: list, targets: list):
        """Run the step; return (true losses of the micro-batches, auxiliary losses) of this stage."""
        r, route, m = self.r, self.route, len(inputs)
        last = route.pp - 1
        sends, receives, early = route.sends(r), route.receives(r), route.early(r)
        rows = inputs[0].size(0)
        saved, handles, losses, aux = {}, [], [], []
        for op, i in route.order(r, m):
            if op == "F":
                if r == 0:
                    x = inputs[i]
                else:
                    x = self.comm_f.recv(torch.empty(self.boundary_shape(rows)), r - 1,
                                         phase=FWD)  # (mb, T, C) from the stage below
                    x = x.requires_grad_() if sends else LocalBoundary.apply(x)
                with self.ctx.span("F", stage=r, mb=i, step=step), self.meter:
                    out = self.stage(x)  # (mb, T, C), or (mb, T, vocab) on the last stage
                    own = None
                    if r == last:
                        loss = self.stage.loss(out, targets[i])
                        losses.append(loss.item())
                        own = loss / m  # the step's loss is the mean over equal micro-batches
                    elif self.head is not None:
                        a = self.head.loss(out, targets[i])
                        aux.append(a.item())
                        own = route.weight(r) * a / m
                if r < last:
                    handles.append(self.comm_f.isend(out.detach(), r + 1, phase=FWD))  # (mb, T, C)
                if early:  # own loss only: its input gradient goes down now
                    dx = self._pass("B", step, i, x, [(own, None)], [])  # (1, mb, T, C)
                    handles.append(self.comm_b.isend(dx, r - 1, phase=BWD))
                    own = None
                saved[i] = (x, out, own)
            else:
                x, out, own = saved.pop(i)
                g = None
                if receives:
                    g = self.comm_b.recv(torch.empty((len(receives),) + self.boundary_shape(rows)),
                                         r + 1, phase=BWD)  # (k, mb, T, C), one per loss
                send, keep = [], []
                if own is not None:
                    (send if r in sends else keep).append((own, None))
                for k, loss_index in enumerate(receives):
                    (send if loss_index in sends else keep).append((out, g[k]))
                if send or keep:
                    dx = self._pass("B" if send else "W", step, i, x, send, keep)
                    if send:
                        handles.append(self.comm_b.isend(dx, r - 1, phase=BWD))  # (k, mb, T, C)
                del x, out, own, g
        for h in handles:
            h.wait()
        return losses, aux
