"""One rank's training step of `local` and `interlocking` on the pipeline's one executor:
activations go up, gradient components come down, none further than `depth` boundaries.

The order is a schedule (`route_schedule`) run by `parlab.pipeline.executor.PipelineExecutor`;
what routes truncate is in the lowered list (`route_actions`) and the strategy (`Interlocking`).
F sends its activation up (and, "early", its own loss's input gradient down at once); B receives
the (k, mb, T, C) gradient components still within reach and sends on those with depth left.
Depth 0 (`local`, Belilovsky et al., ICML 2020) sends nothing down; Gomez et al., "Interlocking
Backpropagation" (JMLR 2022) is depth ≥ 1. Spans are named F, B, W as in chapter 04.

Simplification: the truncated lists drop messages from `Schedule.lowered()`, so deadlock freedom
rests on `Route.warmup`'s argument (`routes`), not on the simulator. The step in detail:
docs/local_learning.md, `parlab.local_learning.interlock`.
"""

from __future__ import annotations

from parlab.local_learning.local_boundary import LocalBoundary, backward_roots
from parlab.local_learning.routes import Route
from parlab.pipeline.executor import StageStrategy
from parlab.pipeline.schedules import Action, Schedule


def route_schedule(route: Route, m: int) -> Schedule:
    """Every stage's `Route.order` as a schedule (one stage per rank, no split backward)."""
    return Schedule("interlocking", route.pp, m, 1, False,
                    tuple(tuple(Action(op, r, i) for op, i in route.order(r, m))
                          for r in range(route.pp)))


def route_actions(route: Route, m: int, rank: int) -> list[Action]:
    """`rank`'s lowered actions with the route's truncation: no RECV_B where no loss reaches down
    to it, no SEND_B where none goes further, and an early stage's SEND_B right after its F (and
    the F's SEND_F)."""
    early, last = route.early(rank), rank == route.pp - 1
    seq = []
    for a in route_schedule(route, m).lowered()[rank]:
        if a.op == "RECV_B" and not route.receives(rank) or \
                a.op == "SEND_B" and (early or not route.sends(rank)):
            continue
        seq.append(a)
        if early and a.op == ("F" if last else "SEND_F"):
            seq.append(Action("SEND_B", rank, a.mb))
    return seq


class Interlocking(StageStrategy):
    """The stage strategy of a route: F adds the stage's own loss (auxiliary, weighted, or the true
    one), an early stage differentiates it at once; B differentiates every loss within reach and
    sends down, stacked, those with depth left. `aux` collects the step's auxiliary losses."""

    def __init__(self, ctx, route: Route, head, params: list):
        self.ctx, self.route, self.head, self.params = ctx, route, head, params
        self.aux: list[float] = []

    def recv_shape(self, op: str, stage: int, rows: int) -> tuple:
        shape = self.executor.boundary_shape(rows)  # (mb, T, C)
        return (len(self.route.receives(stage)),) + shape if op == "RECV_B" else shape  # (k, mb, T, C)

    def forward(self, s: int, i: int, stage, x, side_in):
        if s > 0 and not self.route.sends(s):
            x = LocalBoundary.apply(x)  # no gradient crosses: the stage below never waits
        out = stage(x)  # (mb, T, C), or (mb, T, vocab) on the last stage
        own = None
        if s < self.route.pp - 1 and self.head is not None:
            a = self.head.loss(out, self.executor.target(i))
            self.aux.append(a.item())
            own = self.route.weight(s) * a / self.executor.schedule.microbatches
        return out, {"own": own}  # the last stage's own loss is the executor's loss root

    def outputs(self, step: int, s: int, i: int, x, out, side_out) -> None:
        if s == self.route.pp - 1:
            side_out["own"] = out  # the true loss / m

    def grad_to_send(self, step: int, s: int, i: int):
        """An early stage's SEND_B follows its F: differentiate its own loss now (after the
        activation went up); a late one's follows B, which left the stacked components."""
        if not self.route.early(s):
            return super().grad_to_send(step, s, i)  # (k, mb, T, C)
        x, _, _, _, side_out = self.executor.saved[(s, i)]
        with self.ctx.span("B", stage=s, mb=i, step=step), self.executor.meter:
            dx = backward_roots(x, [(side_out["own"], None)], [], self.params)  # (1, mb, T, C)
        side_out["own"] = None
        return dx

    def backward_span(self, s: int, side_out) -> str | None:
        receives, sends = self.route.receives(s), self.route.sends(s)
        if side_out["own"] is None and not receives:
            return None  # nothing reaches this stage any more
        send = (side_out["own"] is not None and s in sends) or any(k in sends for k in receives)
        return "B" if send else "W"

    def backward(self, s: int, i: int, roots: list, grads: list, x, side_in, side_out):
        out, g = roots[0], grads[0]  # g: (k, mb, T, C), one component per loss within reach
        sends, send, keep = self.route.sends(s), [], []
        if side_out["own"] is not None:
            (send if s in sends else keep).append((side_out["own"], None))
        for k, loss_index in enumerate(self.route.receives(s)):
            (send if loss_index in sends else keep).append((out, g[k]))
        return backward_roots(x, send, keep, self.params)  # (k, mb, T, C) or None
