"""Run one rank's lowered action list for one training step: forwards, backwards, weight
gradients, and the activations and gradients that cross ranks through `parlab.core.comm.Comm`.

The executor loops over the list `Schedule.lowered()` produced — the list the validator simulated
and `cost` drew — so what runs is what was checked. Receives block (that wait *is* the bubble);
sends are non-blocking and waited at the end of the step (deadlock-free: `validate.simulate`).
Activations and gradients use two communicators, each a FIFO channel per (kind, src, dst, direction).
Receives are posted ahead (`RECEIVES_AHEAD`) on plain communicators; activation memory is metered
on the first step only. Split backward (zero bubble: Qi et al., ICLR 2024, §2): B gives the input
gradient, W the weight gradients (`parlab.pipeline.zb_backward`); two directions: DualPipe.
What a stage does besides (U-Net skips, weight stashing, interlocking, placed operators) is a
`StageStrategy`. Why receives are posted ahead, what metering costs and the strategies:
docs/pipeline.md, `parlab.pipeline.executor`.
"""

from __future__ import annotations

import contextlib

import torch

from parlab.core.precision import compute_dtype
from parlab.pipeline.schedules import Action, Schedule
from parlab.pipeline.zb_backward import LinearTape, input_backward, weight_backward

RECEIVES_AHEAD = 4  # receives in flight before they are needed: enough to hide the handshake
# few enough that 1F1B's buffers stay bounded by the schedule, not by the micro-batch count


def _posts_ahead(channel) -> bool:
    """A plain `Comm` without an emulated link (a resharding `Boundary` receives synchronously)."""
    return hasattr(channel, "irecv") and getattr(channel, "link", "none") is None


class StageStrategy:
    """What a stage does beside the one activation it receives and the one it sends: the hooks the
    executor calls around each F and B. The default is the transformer pipeline's: F runs
    `stage(x)`, the last stage's loss is the mean over the step's m equal micro-batches, B is one
    autograd backward. A strategy overrides only what its stages change — what else a stage
    receives before F and sends after it and the gradients of those (the U-Net's skips,
    `parlab.pipeline.unet_executor.UNetSkips`), which weights F and B use and what a finished
    backward triggers (PipeDream's weight stashing, `parlab.local_learning.stash.WeightStashing`),
    which losses B differentiates and what gradient a SEND_B carries (interlocking's routes,
    `parlab.local_learning.interlock.Interlocking`). Simplification: a split backward (B/W, zero
    bubble) runs the default strategy only (the executor refuses another)."""

    executor = None  # the PipelineExecutor running it (set by the executor)

    def recv_shape(self, op: str, stage: int, rows: int) -> tuple:
        """Shape of what RECV_F (the stage's input) / RECV_B (∂L/∂its output) brings to `stage`."""
        return self.executor.boundary_shape(rows)

    def span_args(self, kind: str, s: int, i: int) -> dict:
        """What F(s, i) / B(s, i)'s span notes on the timeline besides stage, micro-batch, step."""
        return {}

    def inputs(self, s: int, i: int, rows: int):
        """Before F(s, i), outside its span: what the stage takes besides its input."""
        return None

    def forward(self, s: int, i: int, stage, x, side_in):
        """In F's span: (output, what B needs besides input and output)."""
        return stage(x), None

    def outputs(self, step: int, s: int, i: int, x, out, side_out) -> None:
        """After F(s, i) (`out`: the output, or the loss root on the last stage): send what the
        stage produced besides its output."""

    def loss_root(self, loss, m: int):
        """The root of the last stage's backward: the global loss is the mean over equal
        micro-batches."""
        return loss / m

    def roots(self, s: int, i: int, side_out, rows: int) -> tuple[list, list]:
        """Before B(s, i), outside its span: further (roots, their gradients) of the backward."""
        return [], []

    def backward_span(self, s: int, side_out) -> str | None:
        """The name of B(s, i)'s span on the timeline; None: B has nothing to compute."""
        return "B"

    def backward(self, s: int, i: int, roots: list, grads: list, x, side_in, side_out):
        """In B's span: the backward; returns ∂L/∂x (None where x needs no gradient)."""
        torch.autograd.backward(roots, grads)
        return x.grad if x.requires_grad else None

    def input_grads(self, s: int, i: int, side_in) -> None:
        """After B(s, i): send back the gradients of what `inputs` took."""

    def grad_to_send(self, step: int, s: int, i: int):
        """At SEND_B(s, i): ∂L/∂(stage input) to send down, which B left (mb, T, C)."""
        return self.executor.grad_in.pop((s, i))

    def done(self, step: int, s: int, i: int) -> None:
        """Once per B(s, i), when it is over: its input gradient handed on (posted by the SEND_B
        after it, or kept for a stage on this rank, or none to hand on)."""


class PipelineExecutor:
    """Executes this rank's lowered actions of `schedule` on its `stages` ({stage id: Stage}), with
    the per-stage behaviour of `strategy` (`StageStrategy`; the default when None).

    What lives between actions (arrived inputs, saved forwards, gradients to send) is kept on the
    executor, not per step: a schedule that never flushes (PipeDream) runs its actions in slices,
    one per step, and a micro-batch's forward and backward may fall in different slices."""

    def __init__(self, ctx, schedule: Schedule, pp_rank: int, stages: dict, comm_f, comm_b,
                 boundary_shape, meter, strategy: StageStrategy | None = None):
        self.ctx, self.schedule, self.pp_rank, self.stages = ctx, schedule, pp_rank, stages
        self.actions = schedule.lowered()[pp_rank]
        self.comm_f, self.comm_b = comm_f, comm_b
        self.boundary_shape = boundary_shape  # rows -> activation shape between stages
        self.strategy = strategy if strategy is not None else StageStrategy()
        self.strategy.executor = self
        if schedule.split_backward and type(self.strategy) is not StageStrategy:
            raise ValueError(f"schedule {schedule.name!r} splits the backward: its stages run the "
                             "default strategy only")
        # activations between stages travel in the compute dtype (16 bits in mixed precision)
        self.dtype = compute_dtype(getattr(ctx.cfg, "precision", "fp32"))
        self.meter = meter
        self._metered = False  # the first step has been metered (module docstring)
        self.in_flight, self.in_flight_peak = 0, 0  # micro-batches whose activations are alive
        self.microbatch_bytes: dict[int, int] = {}  # stage -> activation bytes one F saved
        self.box: dict[tuple, torch.Tensor] = {}  # ("F"|"B", stage, mb) -> arrived input / grad
        self.saved: dict[tuple, tuple] = {}  # (stage, mb) -> what F left for B
        self.grad_in: dict[tuple, torch.Tensor] = {}  # (stage, mb) -> ∂L/∂input to send back
        self.stash: dict[tuple, list] = {}  # (stage, mb) -> what W needs
        self.sends: list = []  # this slice's send handles, waited at its end
        self._batch: tuple = ((), (), 0)  # this slice's (inputs, targets, first micro-batch)

    def target(self, i: int):
        """Micro-batch i's targets (for a strategy's own loss)."""
        _, targets, first = self._batch
        return targets[i - first]

    def run_step(self, step: int, inputs: list, targets: list, actions: list | None = None,
                 first_mb: int = 0) -> list[float]:
        """Run `actions` (default: the step's whole list); micro-batch i's data is
        inputs[i − first_mb], targets[i − first_mb]. Returns the last stage's per-micro-batch
        losses (else [])."""
        sched, last, st = self.schedule, self.schedule.stages - 1, self.strategy
        m = sched.microbatches
        box, saved, grad_in, stash = self.box, self.saved, self.grad_in, self.stash
        actions = self.actions if actions is None else actions
        losses = []
        self._batch = (inputs, targets, first_mb)
        rows = inputs[0].size(0)
        receives = _Receives(self, actions, rows)
        metering = not self._metered
        meter = self.meter if metering else contextlib.nullcontext()
        self._metered = True
        for a in actions:
            s, i = a.stage, a.mb
            receives.post_ahead()
            if a.op in ("RECV_F", "RECV_B"):
                box[(a.op[-1], s, i)] = receives.take(a)  # (mb, T, C) activation or gradient
            elif a.op == "SEND_F":
                out = saved[(s, i)][3].detach()  # (mb, T, C)
                self.sends.append(self.comm_f.isend(out, sched.rank_of(s + 1, a.dir), phase="pp-fwd"))
            elif a.op == "SEND_B":
                g = st.grad_to_send(step, s, i)  # (mb, T, C)
                self.sends.append(self.comm_b.isend(g, sched.rank_of(s - 1, a.dir), phase="pp-bwd"))
                if (s, i) not in saved:  # B(s, i) has run (an early send follows its F instead)
                    st.done(step, s, i)
            elif a.op == "F":
                receives.post_pair(a)  # an F&B pair: B's input asked for now (module docstring)
                stage = self.stages[s]
                x = (None if not sched.main_path else inputs[i - first_mb] if s == 0
                     else box.pop(("F", s, i)).detach().requires_grad_())
                side_in = st.inputs(s, i, rows)
                before = self.meter.current
                with self.ctx.span("F", stage=s, mb=i, step=step, **st.span_args("F", s, i)), meter:
                    if sched.split_backward:
                        with LinearTape(stage) as tape:
                            out, side_out = st.forward(s, i, stage, x, side_in)
                    else:
                        (out, side_out), tape = st.forward(s, i, stage, x, side_in), None
                    if s == last:
                        loss = stage.loss(out, targets[i - first_mb])
                        losses.append(loss.item())
                        out = st.loss_root(loss, m)
                if metering:
                    self.microbatch_bytes.setdefault(s, self.meter.current - before)
                st.outputs(step, s, i, x, out, side_out)
                saved[(s, i)] = (x, side_in, tape, out, side_out)
                if s < last and sched.main_path and sched.rank_of(s + 1, a.dir) == self.pp_rank:
                    box[("F", s + 1, i)] = out.detach()
                self.in_flight += 1
                self.in_flight_peak = max(self.in_flight_peak, self.in_flight)
            elif a.op == "B":
                x, side_in, tape, out, side_out = saved.pop((s, i))
                # (mb, T, C), or None: the loss (or a route that sends no gradient to s)
                g = box.pop(("B", s, i), None)
                more, more_grads = st.roots(s, i, side_out, rows)
                dx, name = None, st.backward_span(s, side_out)
                if name is not None:
                    with self.ctx.span(name, stage=s, mb=i, step=step, **st.span_args("B", s, i)), \
                            meter:
                        if sched.split_backward:
                            dx, stash[(s, i)] = input_backward(out, g, x, tape, self.stages[s])
                            for _, xin, dy in stash[(s, i)] if metering else ():
                                self.meter.track(xin, dy)  # the stash holds activations until W
                        else:
                            dx = st.backward(s, i, [out] + more, [g] + more_grads, x, side_in,
                                             side_out)
                if not sched.split_backward:
                    self.in_flight -= 1  # (a split backward's activations live until its W)
                del out, tape, more
                st.input_grads(s, i, side_in)
                if dx is not None and s > 0 and sched.rank_of(s - 1, a.dir) != self.pp_rank:
                    grad_in[(s, i)] = dx  # sent by the SEND_B that follows
                else:
                    if dx is not None:
                        box[("B", s - 1, i)] = dx
                    st.done(step, s, i)
            elif a.op == "W":
                with self.ctx.span("W", stage=s, mb=i, step=step):
                    weight_backward(stash.pop((s, i)))
                self.in_flight -= 1
        for handle in self.sends:
            handle.wait()
        self.sends = []
        return losses


class _Receives:
    """This step's receives in list order: each kind posted up to `RECEIVES_AHEAD` ahead of its
    use where its channel allows (module docstring), else posted and waited when taken."""

    def __init__(self, executor, actions: list, rows: int):
        self.x, self.rows = executor, rows
        self.pending = [a for a in actions if a.op in ("RECV_F", "RECV_B")]
        self.ahead = {"RECV_F": _posts_ahead(executor.comm_f), "RECV_B": _posts_ahead(executor.comm_b)}
        self.posted: dict = {}  # action -> Handle of its receive
        self.next = 0
        paired = executor.schedule.paired(executor.pp_rank)  # {B: F} of this rank's F&B pairs
        self.pair_receive = {f: Action("RECV_B", b.stage, b.mb, b.dir) for b, f in paired.items()}

    def _start(self, a, ahead: bool):
        """Post `a`'s receive (`irecv`, a handle) ahead, or receive it now (`recv`, the tensor)."""
        x, sched = self.x, self.x.schedule
        buf = torch.empty(x.strategy.recv_shape(a.op, a.stage, self.rows), dtype=x.dtype)  # (mb, T, C)
        channel, peer, phase = ((x.comm_f, sched.rank_of(a.stage - 1, a.dir), "pp-fwd")
                                if a.op == "RECV_F"
                                else (x.comm_b, sched.rank_of(a.stage + 1, a.dir), "pp-bwd"))
        return (channel.irecv if ahead else channel.recv)(buf, peer, phase=phase)

    def post_ahead(self) -> None:
        while (self.next < len(self.pending) and len(self.posted) < RECEIVES_AHEAD
               and self.ahead[self.pending[self.next].op]):
            a = self.pending[self.next]
            self.posted[a] = self._start(a, ahead=True)
            self.next += 1

    def post_pair(self, f) -> None:
        """F starts an F&B pair: post the pair's B receive now, on any channel (DualPipe's pair
        asks for both inputs at its start; `parlab.pipeline.dualpipe`), so on an emulated link the
        transfer, charged from its post, runs behind F's compute. Only if it is the next receive
        in list order (each channel stays FIFO) and not posted already."""
        r = self.pair_receive.get(f)
        if r is None or r in self.posted or self.next >= len(self.pending) \
                or self.pending[self.next] != r:
            return
        self.posted[r] = self._start(r, ahead=True)
        self.next += 1

    def take(self, a):
        """The tensor action `a` receives (waited here)."""
        if a in self.posted:
            return self.posted.pop(a).wait()
        assert self.pending[self.next] is a, "receives are taken in list order"
        self.next += 1
        return self._start(a, ahead=False)
