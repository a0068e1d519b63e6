"""A placed operator graph as a training step: each rank runs its list of tasks, activations and
gradients cross ranks as send/recv through `parlab.core.comm.Comm` (every byte in the ledger).

She et al. (2025, arXiv 2503.09357, §3) place and order operators; this makes a
`placement.tasks.PlacementPlan` a step of the one loop (`PlacedStrategy`, scheme "placed"), run by
chapter 04's `PipelineExecutor`: the plan is a `Schedule` whose stages are the ops (`schedule_of`),
and what an op does around F and B is a `StageStrategy` (`PlacedOps`). A 1F1B pipeline of the same
graph (`placement.pipeline_1f1b`) runs the same way, so the two differ only in placement and
order. Messages are derived from the plan (`messages`): an activation once to every other rank
holding a consumer, its gradient back. Memory is measured beside the planner's model
(`op_costs.peak_memory`: measured ≤ model). The message and memory rules: docs/planner.md,
`parlab.planner.placement.placed`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.autograd.graph import saved_tensors_hooks

from parlab.core.memory import model_memory
from parlab.engine.loop import Strategy, build_model, make_optimizer
from parlab.models.op_graph import DATA, OpGraphSplit
from parlab.pipeline.actions import Action, Schedule
from parlab.pipeline.executor import PipelineExecutor, StageStrategy
from parlab.planner.placement.op_costs import tensor_key
from parlab.planner.placement.tasks import PlacementPlan, Task


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


def schedule_of(plan: PlacementPlan, names: tuple, microbatches: int) -> Schedule:
    """The plan as a schedule: per rank its F/B tasks as actions of stage `names.index(op)`, the
    stages placed op by op, no main path (every message is an edge of the graph: `PlacedOps`)."""
    index = {n: s for s, n in enumerate(names)}
    actions = tuple(tuple(Action(t.kind, index[t.op], t.mb) for t in seq) for seq in plan.order)
    return Schedule(plan.name, plan.ranks, microbatches, 1, False, actions,
                    placement=tuple(plan.placement[n] for n in names), main_path=False)


def _recorder(saved: dict, owned: set):
    """A saved-tensors pack hook that notes each saved tensor's bytes (parameters left out)."""
    def pack(x):
        if x.data_ptr() not in owned:
            saved[tensor_key(x)] = x.numel() * x.element_size()
        return x
    return pack


class _OpStage:
    """What the executor calls on a stage besides the op: the head op's output is its loss."""

    @staticmethod
    def loss(out, target):
        return out


class PlacedOps(StageStrategy):
    """The placed graph on `PipelineExecutor`: stage s is op `names[s]` (topological order, the
    head last); F takes the op's inputs — the micro-batch's data, this rank's outputs, activations
    posted for at the step's start — and sends its output to the ranks of its other consumers;
    B adds this rank's consumers' gradient shares and the ones received, and after the last
    local consumer of a remote input sends that input's summed gradient to its rank (`messages`)."""

    def __init__(self, placed: PlacedStrategy):
        self.p = placed

    def span_args(self, kind: str, s: int, i: int) -> dict:
        return {"task": (kind, self.p.names[s], i)}  # a Task of the plan

    def inputs(self, s: int, i: int, rows: int):
        p = self.p
        return [(p.micro[i][u] if u in DATA else p.outs[u, i].detach() if p.place[u] == p.rank
                 else p.posted[("act", u, i, p.place[u])].wait())
                .detach().requires_grad_(u not in DATA)
                for u in p.graph.op(p.names[s]).inputs]  # (B/m, T, ·) each

    def forward(self, s: int, i: int, stage, x, side_in):
        p, name = self.p, self.p.names[s]
        saved: dict = {}
        with saved_tensors_hooks(_recorder(saved, p.owned[name]), lambda v: v):
            out = p.model[name](*side_in)  # (B/m, T, ·), the head: its loss
        p.outs[name, i] = out
        saved[tensor_key(out)] = out.numel() * out.element_size()
        return out, saved

    def outputs(self, step: int, s: int, i: int, x, out, side_out) -> None:
        p = self.p
        p.live[p.names[s], i] = side_out  # what this rank holds now: every live F's tensors
        union = {k: b for held in p.live.values() for k, b in held.items()}
        p.peak = max(p.peak, sum(union.values()))
        p.send_after(Task("F", p.names[s], i))

    def roots(self, s: int, i: int, side_out, rows: int):
        p, name = self.p, self.p.names[s]
        grad = p.gacc.pop((name, i), None)  # this rank's consumers' share, (B/m, T, ·)
        for d in sorted({p.place[v] for v in p.graph.consumers(name)} - {p.rank}):
            got = p.posted[("grad", name, i, d)].wait()  # (B/m, T, ·) from rank d
            grad = got if grad is None else grad + got
        self.grad = grad  # None for the head: its root is the loss's share
        return [], []

    def backward(self, s: int, i: int, roots: list, grads: list, x, side_in, side_out):
        p, name = self.p, self.p.names[s]
        torch.autograd.backward(roots[0], self.grad)
        for u, leaf in zip(p.graph.op(name).inputs, side_in):
            if u not in DATA:
                key = (u, i)
                p.gacc[key] = leaf.grad if key not in p.gacc else p.gacc[key] + leaf.grad
        p.outs.pop((name, i))
        return None

    def input_grads(self, s: int, i: int, side_in) -> None:
        p = self.p
        p.live.pop((p.names[s], i))
        p.send_after(Task("B", p.names[s], i))


class PlacedStrategy(Strategy):
    """One rank of a placed step: the whole model is built from the seed on every rank (so its
    weights are the reference's); this rank trains the ops the plan puts here, with the run's
    optimizer over their parameters only, and the one pipeline executor runs its tasks in the
    plan's order (the plan as a `Schedule`: `schedule_of`; the op behaviour: `PlacedOps`)."""

    def __init__(self, ctx, plan: PlacementPlan, microbatches: int):
        cfg, rank = ctx.cfg, ctx.rank
        model = build_model(cfg)
        self.plan, self.place, self.rank = plan, plan.placement, rank
        self.graph = OpGraphSplit(model.config, cfg.batch_size, microbatches)
        self.names = self.graph.names
        self.mine = [n for n in self.names if self.place[n] == rank]
        self.params = [p for n in self.mine for p in model[n].parameters()]
        optimizer = make_optimizer(self.params, cfg) if self.params else None
        super().__init__(ctx, model, optimizer, reports_loss=self.place["head"] == rank,
                         holds_state=bool(self.mine))
        sends = messages(self.graph, plan)
        self.incoming = [msg for seq in sends for msg in seq if msg.dst == rank]  # sender order
        self.after: dict[Task, list] = {}
        for msg in sends[rank]:
            self.after.setdefault(msg.after, []).append(msg)
        self.owned = {n: {p.data_ptr() for p in model[n].parameters()} for n in self.names}
        self.weights = sum(2 * p.numel() * p.element_size() for p in self.params)  # params + grads
        self.live: dict = {}  # (op, mb) -> {tensor key: bytes} its forward saved, until its backward
        self.step_memory: list[int] = []  # per step: weights + the most bytes live forwards saved
        self.marks: list[tuple] = []  # per step: (start, end of the last task), paced or real
        stages = {self.names.index(n): _OpStage() for n in self.mine}
        self.executor = PipelineExecutor(ctx, schedule_of(plan, self.names, microbatches), rank,
                                         stages, ctx.comm, ctx.comm, lambda rows: None, self.meter,
                                         PlacedOps(self))

    def send_after(self, task: Task) -> None:
        """The messages that leave once `task` is done: (B/m, T, ·) activations or gradients."""
        for msg in self.after.get(task, ()):
            sent = self.outs[msg.op, msg.mb] if msg.kind == "act" else self.gacc.pop((msg.op, msg.mb))
            self.handles.append(self.ctx.comm.isend(sent.detach(), msg.dst, phase=msg.kind))

    def forward_backward(self, step: int, batch) -> float:
        g, comm = self.graph, self.ctx.comm
        x, y = batch  # (B, T, D_IN), (B, T, D_OUT)
        self.micro = [{"x": x[k * g.mb_rows:(k + 1) * g.mb_rows], "y": y[k * g.mb_rows:(k + 1) * g.mb_rows]}
                      for k in range(g.microbatches)]  # (B/m, T, ·) each
        comm.barrier(phase="align")  # every rank starts the step together: makespans compare
        t_start = comm.timeline.now()
        self.posted = {(m.kind, m.op, m.mb, m.src): comm.irecv(torch.empty(g.shape(m.op)), m.src,
                                                               phase=m.kind) for m in self.incoming}
        self.outs, self.gacc, self.handles, self.peak = {}, {}, [], 0
        losses = self.executor.run_step(step, [mb["x"] for mb in self.micro],
                                        [mb["y"] for mb in self.micro])
        self.marks.append((t_start, comm.timeline.now()))
        for h in self.handles + list(self.posted.values()):
            h.wait()
        self.step_memory.append(self.weights + self.peak)
        self.meter.peak = max(self.meter.peak, self.peak)
        return sum(losses) / g.microbatches

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


__all__ = ["Message", "messages", "PlacedOps", "PlacedStrategy", "schedule_of"]
