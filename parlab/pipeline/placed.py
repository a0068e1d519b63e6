"""A placed operator graph as a training step: each rank runs its list of tasks, activations and
gradients cross ranks as send/recv through `parlab.core.comm.Comm` (every byte in the ledger).

She et al. (2025, arXiv 2503.09357, §3) place and order operators; this is the executor that makes
a `parlab.planner.placement.PlacementPlan` a training step of the one loop (`PlacedStrategy`,
registered as "placed" in `parlab.pipeline.schemes_placed`). A 1F1B pipeline of the same graph
(`parlab.planner.placement_1f1b.pipeline_plan`) is a plan too, run by this same executor, so the
two differ only in placement and order.

Messages are derived from the plan, not written by hand (`messages`): after F(u, k) its activation
(B/m, T, ·) goes once to every other rank that holds a consumer of u; after the last B on a rank
of u's consumers there, the gradient of u's output (same shape, summed over that rank's consumers)
goes back to u's rank. Each receiver posts all its receives at the start of the step, in each
sender's send order, and waits on one just before the task that needs it. An emulated `link` is
the run's own (`Comm`: a message is charged α + n/β when it is waited on).

Memory, beside the planner's model (`parlab.planner.placement.peak_memory`): each forward runs
under a saved-tensors hook that notes every tensor autograd saves (parameters left out) and its
output; after each forward the rank's live set — the union over forwards whose backward has not
run, each buffer once — is summed, and the step's peak plus the weights (parameters and
gradients) is this rank's `extras["step_memory"]`. The model counts each op's saved tensors on
their own, so a buffer two ops save (a producer's output its consumer saves as input) counts twice
there and once here: measured ≤ model. Not counted on either side: the receive buffers this
executor posts for the whole step and the gradients it accumulates between backwards.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.autograd.graph import saved_tensors_hooks

from parlab.core.memory import model_memory
from parlab.engine.loop import Strategy, build_model, make_optimizer
from parlab.models.op_graph import DATA, OpGraphSplit
from parlab.planner.placement import PlacementPlan, Task, tensor_key


class Message(NamedTuple):
    kind: str  # "act": u's output, forward; "grad": the gradient of u's output, backward
    op: str  # u, the producer op
    mb: int
    src: int
    dst: int
    nbytes: int
    after: Task  # the sender's task after which it leaves


def messages(graph, plan: PlacementPlan) -> list[list[Message]]:
    """Per rank: the messages it sends, in the order it sends them (`graph`: an
    `parlab.models.op_graph.OpStructure`)."""
    place, out = plan.placement, []
    for rank, seq in enumerate(plan.order):
        sent = []
        position = {t: i for i, t in enumerate(seq)}
        for t in seq:
            if t.kind == "F":
                for dst in sorted({place[v] for v in graph.consumers(t.op)} - {rank}):
                    sent.append(Message("act", t.op, t.mb, rank, dst, graph.nbytes(t.op), t))
                continue
            for u in graph.op(t.op).inputs:
                if u in DATA or place[u] == rank:
                    continue
                here = [Task("B", v, t.mb) for v in graph.consumers(u) if place[v] == rank]
                if max(here, key=position.get) == t:  # the last local consumer: send the sum
                    sent.append(Message("grad", u, t.mb, rank, place[u], graph.nbytes(u), t))
        out.append(sent)
    return out


def _recorder(saved: dict, owned: set):
    """A saved-tensors pack hook that notes each saved tensor's bytes (parameters left out)."""
    def pack(x):
        if x.data_ptr() not in owned:
            saved[tensor_key(x)] = x.numel() * x.element_size()
        return x
    return pack


class PlacedStrategy(Strategy):
    """One rank of a placed step: the whole model is built from the seed on every rank (so its
    weights are the reference's); this rank trains the ops the plan puts here, with the run's
    optimizer over their parameters only, and runs its tasks in the plan's order."""

    def __init__(self, ctx, plan: PlacementPlan, microbatches: int):
        cfg, rank = ctx.cfg, ctx.rank
        model = build_model(cfg)
        self.plan, self.place = plan, plan.placement
        self.graph = OpGraphSplit(model.config, cfg.batch_size, microbatches)
        self.mine = [n for n in self.graph.names if self.place[n] == rank]
        self.params = [p for n in self.mine for p in model[n].parameters()]
        optimizer = make_optimizer(self.params, cfg) if self.params else None
        super().__init__(ctx, model, optimizer, reports_loss=self.place["head"] == rank,
                         holds_state=bool(self.mine))
        sends = messages(self.graph, plan)
        self.incoming = [msg for seq in sends for msg in seq if msg.dst == rank]  # sender order
        self.after: dict[Task, list] = {}
        for msg in sends[rank]:
            self.after.setdefault(msg.after, []).append(msg)
        self.owned = {n: {p.data_ptr() for p in model[n].parameters()} for n in self.graph.names}
        self.weights = sum(2 * p.numel() * p.element_size() for p in self.params)  # params + grads
        self.live: dict = {}  # (op, mb) -> {tensor key: bytes} its forward saved, until its backward
        self.step_memory: list[int] = []  # per step: weights + the most bytes live forwards saved
        self.marks: list[tuple] = []  # per step: (start, end of the last task), perf_counter

    def forward_backward(self, step: int, batch) -> float:
        g, comm, place, rank = self.graph, self.ctx.comm, self.place, self.ctx.rank
        x, y = batch  # (B, T, D_IN), (B, T, D_OUT)
        micro = [{"x": x[k * g.mb_rows:(k + 1) * g.mb_rows], "y": y[k * g.mb_rows:(k + 1) * g.mb_rows]}
                 for k in range(g.microbatches)]  # (B/m, T, ·) each
        comm.barrier(phase="align")  # every rank starts the step together: makespans compare
        t_start = comm.timeline.now()
        posted = {(m.kind, m.op, m.mb, m.src): comm.irecv(torch.empty(g.shape(m.op)), m.src,
                                                          phase=m.kind) for m in self.incoming}
        leaves, outs, gacc, loss, handles, peak = {}, {}, {}, 0.0, [], 0
        for t in self.plan.order[rank]:
            span = self.ctx.span("forward" if t.kind == "F" else "backward", step=step, task=tuple(t))
            if t.kind == "F":  # inputs first: a wait for a message is not compute
                xs = [(micro[t.mb][u] if u in DATA else outs[u, t.mb].detach()
                       if place[u] == rank else posted[("act", u, t.mb, place[u])].wait())
                      .detach().requires_grad_(u not in DATA)
                      for u in g.op(t.op).inputs]  # (B/m, T, ·) each
                saved: dict = {}
                with span, saved_tensors_hooks(_recorder(saved, self.owned[t.op]), lambda v: v):
                    out = self.model[t.op](*xs)
                leaves[t.op, t.mb], outs[t.op, t.mb] = xs, out
                if t.op == "head":
                    loss += out.item() / g.microbatches
                saved[tensor_key(out)] = out.numel() * out.element_size()
                self.live[t.op, t.mb] = saved  # what this rank holds now: every live F's tensors
                union = {k: b for held in self.live.values() for k, b in held.items()}
                peak = max(peak, sum(union.values()))
            else:
                grad = gacc.pop((t.op, t.mb), None)  # local consumers' share, (B/m, T, ·)
                for d in sorted({place[v] for v in g.consumers(t.op)} - {rank}):
                    got = posted[("grad", t.op, t.mb, d)].wait()  # (B/m, T, ·) from rank d
                    grad = got if grad is None else grad + got
                if t.op == "head":
                    grad = torch.tensor(1.0 / g.microbatches)  # d(mean over m)/d(loss_k)
                with span:
                    outs.pop((t.op, t.mb)).backward(grad)
                    for u, leaf in zip(g.op(t.op).inputs, leaves.pop((t.op, t.mb))):
                        if u not in DATA:
                            key = (u, t.mb)
                            gacc[key] = leaf.grad if key not in gacc else gacc[key] + leaf.grad
                self.live.pop((t.op, t.mb))
            for msg in self.after.get(t, ()):  # (B/m, T, ·) activation or gradient
                sent = (outs[t.op, t.mb] if msg.kind == "act" else gacc.pop((msg.op, msg.mb)))
                handles.append(comm.isend(sent.detach(), msg.dst, phase=msg.kind))
        self.marks.append((t_start, comm.timeline.now()))
        for h in handles + list(posted.values()):
            h.wait()
        self.step_memory.append(self.weights + peak)
        self.meter.peak = max(self.meter.peak, peak)
        return loss

    def update(self, step: int) -> None:
        if self.optimizer is not None:
            super().update(step)
        else:
            self.observe_memory()

    def memory(self) -> dict:
        return model_memory(self.params, self.optimizer)

    def state(self) -> dict | None:
        if not self.holds_state:
            return None
        return {name: p.detach().clone() for name, p in self.model.named_parameters()
                if name.split(".")[0] in self.mine}

    def extras(self) -> dict:
        return {"step_memory": list(self.step_memory), "marks": list(self.marks),
                "ops": list(self.mine)}


__all__ = ["Message", "messages", "PlacedStrategy"]
