"""Run one rank's lowered actions of a schedule on U-Net stages, whose skip connections travel from
an early stage straight to a late one (Zhu et al., LAMP, MICCAI 2020).

The same action lists as `parlab.pipeline.executor` (validated, drawn and costed by the same code);
the difference is what crosses ranks. The main path still travels s → s+1 on RECV_F / SEND_F (and
its gradient back on RECV_B / SEND_B). A skip k produced by F(s, i) is sent at once (non-blocking)
to the rank of its consumer stage t > s on the "pp-skip" channel, and received there just before
F(t, i) (a blocking receive: its wait is on the timeline); in backward, B(t, i) sends ∂L/∂skip back
on "pp-skip-bwd" and B(s, i) receives it before its own backward, where it is added to the gradient
that flows back through the pooled main path. Every skip message is one Comm send/recv, so the
ledger counts its bytes (`unet_cost.skip_bytes_per_step`).

Why it cannot deadlock: sends never block; F(t, i) depends on F(s, i) through the main path anyway
(t > s), and B(s, i) on B(t, i); every schedule runs one stage per rank with forwards and backwards
in micro-batch order, so each (sender, receiver) pair's skip messages are received in the order they
were sent (skips of one micro-batch by level).
"""

from __future__ import annotations

import torch

from parlab.pipeline.schedules import Schedule
from parlab.pipeline.unet_stages import layer_output_shape, skip_shape


class UNetExecutor:
    """Executes this rank's lowered actions of `schedule` on its U-Net `stages` ({id: UNetStage})."""

    def __init__(self, ctx, schedule: Schedule, pp_rank: int, stages: dict, comm_f, comm_b,
                 skip_f, skip_b, model_config, meter):
        self.ctx, self.schedule, self.pp_rank, self.stages = ctx, schedule, pp_rank, stages
        self.actions = schedule.lowered()[pp_rank]
        self.comm_f, self.comm_b, self.skip_f, self.skip_b = comm_f, comm_b, skip_f, skip_b
        self.cfg, self.meter = model_config, meter
        self.in_flight_peak = 0
        self.microbatch_bytes: dict[int, int] = {}  # stage -> activation bytes one F saved

    def _main_shape(self, stage: int, rows: int) -> tuple:
        """Shape of the main path entering `stage` (the output of the previous stage's last layer)."""
        return layer_output_shape(self.cfg, self.stages[stage].lo - 1, rows)

    def run_step(self, step: int, inputs: list, targets: list) -> list[float]:
        """Run the step's actions; return the last stage's per-micro-batch losses (else [])."""
        sched, m = self.schedule, self.schedule.microbatches
        box: dict[tuple, torch.Tensor] = {}  # ("F"|"B", stage, mb) -> arrived main input / grad
        saved: dict[tuple, tuple] = {}  # (stage, mb) -> (x, skips in, outputs, skips out)
        grad_in: dict[tuple, torch.Tensor] = {}
        sends, losses, in_flight = [], [], 0
        rows = inputs[0].size(0)
        for a in self.actions:
            s, i = a.stage, a.mb
            if a.op == "RECV_F":
                buf = torch.empty(self._main_shape(s, rows))  # (mb, c, s, s, s)
                box[("F", s, i)] = self.comm_f.recv(buf, sched.rank_of(s - 1), phase="pp-fwd")
            elif a.op == "RECV_B":
                shape = layer_output_shape(self.cfg, self.stages[s].hi - 1, rows)  # (mb, c, s, s, s)
                buf = torch.empty(shape)  # ∂L/∂(this stage's output)
                box[("B", s, i)] = self.comm_b.recv(buf, sched.rank_of(s + 1), phase="pp-bwd")
            elif a.op == "SEND_F":
                out = saved[(s, i)][2].detach()  # (mb, c, s, s, s)
                sends.append(self.comm_f.isend(out, sched.rank_of(s + 1), phase="pp-fwd"))
            elif a.op == "SEND_B":
                g = grad_in.pop((s, i))  # (mb, c, s, s, s)
                sends.append(self.comm_b.isend(g, sched.rank_of(s - 1), phase="pp-bwd"))
            elif a.op == "F":
                losses += self._forward(step, s, i, inputs, targets, box, saved, sends, rows, m)
                in_flight += 1
                self.in_flight_peak = max(self.in_flight_peak, in_flight)
            elif a.op == "B":
                self._backward(step, s, i, box, saved, grad_in, sends, rows)
                in_flight -= 1
            else:
                raise ValueError(f"action {a.op!r}: the U-Net pipeline runs schedules without a "
                                 "split backward")
        for handle in sends:
            handle.wait()
        return losses

    def _forward(self, step, s, i, inputs, targets, box, saved, sends, rows, m) -> list[float]:
        stage, sched = self.stages[s], self.schedule
        x = inputs[i] if s == 0 else box.pop(("F", s, i)).detach().requires_grad_()
        skips_in = {}
        for k in stage.skips_in:  # skips addressed to this stage, produced stages earlier
            buf = torch.empty(skip_shape(self.cfg, k, rows))  # (mb, c_k, S/2^k, ., .)
            src = sched.rank_of(stage.producer[k])
            got = box.pop(("S", k, i)) if src == self.pp_rank else \
                self.skip_f.recv(buf, src, phase="pp-skip")  # (mb, c_k, S/2^k, ., .) from stage p
            skips_in[k] = got.detach().requires_grad_()
        before = self.meter.current
        losses = []
        with self.ctx.span("F", stage=s, mb=i, step=step), self.meter:
            out, skips_out = stage(x, skips_in)  # (mb, c, s, s, s), {k: (mb, c_k, ...)}
            if stage.last:
                loss = stage.loss(out, targets[i])
                losses.append(loss.item())
                out = loss / m  # the global loss is the mean over equal micro-batches
        self.microbatch_bytes.setdefault(s, self.meter.current - before)
        for k, h in skips_out.items():  # straight to the consumer stage, past the ones between
            dst = sched.rank_of(stage.consumer[k])
            if dst == self.pp_rank:
                box[("S", k, i)] = h.detach()
            else:
                sends.append(self.skip_f.isend(h.detach(), dst, phase="pp-skip"))  # (mb, c_k, ...)
        saved[(s, i)] = (x, skips_in, out, skips_out)
        if not stage.last and sched.rank_of(s + 1) == self.pp_rank:
            box[("F", s + 1, i)] = out.detach()
        return losses

    def _backward(self, step, s, i, box, saved, grad_in, sends, rows) -> None:
        stage, sched = self.stages[s], self.schedule
        x, skips_in, out, skips_out = saved.pop((s, i))
        roots, grads = [out], [None if stage.last else box.pop(("B", s, i))]
        for k in stage.skips_out:  # ∂L/∂skip from the stage that concatenated it
            src = sched.rank_of(stage.consumer[k])
            buf = torch.empty(skip_shape(self.cfg, k, rows))  # (mb, c_k, S/2^k, ., .)
            g = box.pop(("SB", k, i)) if src == self.pp_rank else \
                self.skip_b.recv(buf, src, phase="pp-skip-bwd")  # ∂L/∂skip (mb, c_k, ...) from t
            roots.append(skips_out[k])
            grads.append(g)
        with self.ctx.span("B", stage=s, mb=i, step=step), self.meter:
            torch.autograd.backward(roots, grads)
        del out, roots
        for k, h in skips_in.items():  # ∂L/∂skip back to the stage that produced it
            src = sched.rank_of(stage.producer[k])
            if src == self.pp_rank:
                box[("SB", k, i)] = h.grad
            else:
                sends.append(self.skip_b.isend(h.grad, src, phase="pp-skip-bwd"))  # (mb, c_k, ...)
        if s > 0:
            if sched.rank_of(s - 1) == self.pp_rank:
                box[("B", s - 1, i)] = x.grad
            else:
                grad_in[(s, i)] = x.grad
