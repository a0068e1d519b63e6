"""Running a placement for real: each rank runs its list of tasks, activations and gradients cross
ranks as send/recv through `parlab.core.comm.Comm` (every byte in the ledger).

She et al. (2025, arXiv 2503.09357) place and order operators; this is the executor that makes a
`parlab.planner.placement.PlacementPlan` a training step, and the baseline it is judged against: a 1F1B
pipeline of the same graph (ops cut into contiguous stages in topological order — PipeDream-Flush:
Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training", ICML 2021 — run by the same
executor, so the two differ only in placement and order).

Messages are derived from the plan, not written by hand (`messages`): after F(u, k) its activation
(B/m, T, ·) goes once to every other rank that holds a consumer of u; after the last B on a rank
of u's consumers there, the gradient of u's output (same shape, summed over that rank's consumers)
goes back to u's rank. Each receiver posts all its receives at the start of the step, in each
sender's send order, and waits on one just before the task that needs it. With an emulated `link`
a message leaves α + n/β after its tensor is ready (one sender thread per rank, so it may also
wait behind the previous message), the sender-side delay of `parlab.pipeline.reshard_boundary`.

Memory, beside the planner's model (`placement.peak_memory`): each forward runs under a
saved-tensors hook that notes every tensor autograd saves (parameters left out) and its output;
after each forward the rank's live set — the union over forwards whose backward has not run, each
buffer once — is summed, and the step's peak plus the weights (parameters and gradients) is
`PlacementRun.memory`. The model counts each op's saved tensors on their own, so a buffer two ops
save (a producer's output its consumer saves as input) counts twice there and once here: measured
≤ model. Not counted on either side: the receive buffers this executor posts for the whole step and
the gradients it accumulates between backwards.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.autograd.graph import saved_tensors_hooks

from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.core.link import Link, resolve
from parlab.pipeline.schedules import one_f_one_b
from parlab.planner.graph import DATA, Graph, reference
from parlab.planner.placement import PlacementPlan, Task, tensor_key


class Message(NamedTuple):
    kind: str  # "act": u's output, forward; "grad": the gradient of u's output, backward
    op: str  # u, the producer op
    mb: int
    src: int
    dst: int
    nbytes: int
    after: Task  # the sender's task after which it leaves


def messages(graph: Graph, plan: PlacementPlan) -> list[list[Message]]:
    """Per rank: the messages it sends, in the order it sends them."""
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


def message_bytes(graph: Graph, plan: PlacementPlan) -> list[int]:
    """Closed form of the ledger: bytes each rank sends per step = Σ over (op u, other rank d
    holding a consumer of u) of 2 · m · bytes(u) — u's activation out, its gradient back."""
    place, sent = plan.placement, [0] * plan.ranks
    for u in graph.names:
        for d in {place[v] for v in graph.consumers(u)} - {place[u]}:
            sent[place[u]] += graph.microbatches * graph.nbytes(u)  # activations, u's rank → d
            sent[d] += graph.microbatches * graph.nbytes(u)  # gradients, d → u's rank
    return sent


# ----------------------------------------------------------------------------- 1F1B baseline
def pipeline_plan(graph: Graph, ranks: int) -> PlacementPlan:
    """1F1B over `ranks` stages: the ops cut into contiguous runs of the topological order with the
    least slowest stage (measured forward + backward; ties: fewer bytes crossing), stage s on rank s."""
    names, (fwd, bwd) = graph.names, graph.times()
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= len(names):
        raise ValueError(f"ranks={ranks!r} must be an int in 1..{len(names)} (one op per stage)")
    best = None
    for cuts in _cuts(len(names), ranks):
        stages = [names[a:b] for a, b in zip((0,) + cuts, cuts + (len(names),))]
        place = {n: s for s, ops in enumerate(stages) for n in ops}
        trial = PlacementPlan("1f1b", ranks, tuple((n, place[n]) for n in names), ((),) * ranks)
        key = (max(sum(fwd[n] + bwd[n] for n in ops) for ops in stages),
               sum(message_bytes(graph, trial)))
        if best is None or key < best[0]:
            best = (key, stages, trial.place)
    _, stages, place = best
    order = []
    for seq in one_f_one_b(ranks, graph.microbatches).actions:
        tasks = []
        for a in seq:  # a stage's forward runs its ops in topological order, its backward reversed
            ops = stages[a.stage] if a.op == "F" else stages[a.stage][::-1]
            tasks += [Task(a.op, n, a.mb) for n in ops]
        order.append(tuple(tasks))
    return PlacementPlan("1f1b", ranks, place, tuple(order), status="stages " + " | ".join(
        ",".join(ops) for ops in stages))


def _cuts(n: int, parts: int, lo: int = 1) -> list[tuple]:
    if parts == 1:
        return [()]
    return [(c,) + rest for c in range(lo, n - parts + 2) for rest in _cuts(n, parts - 1, c + 1)]


# ----------------------------------------------------------------------------- the executor
class _Sender:
    """Sends on this rank, in order; with a link, each leaves α + n/β after its tensor was ready."""

    def __init__(self, comm: Comm, link: Link | None):
        self.comm, self.link, self.handles = comm, link, []
        self.jobs: queue.Queue | None = None
        if link is not None:
            self.jobs = queue.Queue()
            threading.Thread(target=self._loop, daemon=True).start()

    def send(self, tensor, msg: Message) -> None:
        if self.jobs is None:
            self.handles.append(self.comm.isend(tensor, msg.dst, phase=msg.kind))  # (B/m, T, ·)
        else:
            self.jobs.put((tensor, msg, time.perf_counter() + self.link.cost(msg.nbytes)))

    def _loop(self) -> None:
        while True:
            tensor, msg, leave_at = self.jobs.get()
            delay = leave_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            self.handles.append(self.comm.isend(tensor, msg.dst, phase=msg.kind))  # (B/m, T, ·)
            self.jobs.task_done()

    def flush(self) -> None:
        if self.jobs is not None:
            self.jobs.join()
        for h in self.handles:
            h.wait()
        self.handles = []


def _worker(rank: int, world_size: int, graph: Graph, plan: PlacementPlan, steps: int, lr: float,
            link: Link | None) -> dict:
    comm = Comm(link=None)  # the link's delay is applied at the sender (_Sender)
    modules, place = graph.modules(), plan.placement
    mine = [n for n in graph.names if place[n] == rank]
    params = [p for n in mine for p in modules[n].parameters()]
    opt = torch.optim.SGD(params, lr=lr) if params else None
    sender, sends = _Sender(comm, link), messages(graph, plan)
    incoming = [msg for seq in sends for msg in seq if msg.dst == rank]  # each sender's order
    after: dict[Task, list] = {}
    for msg in sends[rank]:
        after.setdefault(msg.after, []).append(msg)
    losses, events, marks, grads = [], [], [], None
    owned = {n: {p.data_ptr() for p in modules[n].parameters()} for n in graph.names}
    weights = sum(2 * p.numel() * p.element_size() for p in params)  # parameters + gradients
    live: dict = {}  # (op, mb) -> {tensor key: bytes} its forward saved, until its backward
    peak = [0] * steps
    for step in range(steps):
        data = graph.data(step)
        micro = [graph.micro(data, k) for k in range(graph.microbatches)]
        comm.barrier()
        t_start = time.perf_counter()
        with comm.ledger.label(step=step):
            posted = {(m.kind, m.op, m.mb, m.src): comm.irecv(
                torch.empty(graph.shape(m.op)), m.src, phase=m.kind) for m in incoming}
            leaves, outs, gacc, loss = {}, {}, {}, 0.0
            for t in plan.order[rank]:
                if t.kind == "F":  # inputs first: a wait for a message is not compute
                    xs = [(micro[t.mb][u] if u in DATA else outs[u, t.mb].detach()
                           if place[u] == rank else posted[("act", u, t.mb, place[u])].wait())
                          .detach().requires_grad_(u not in DATA)
                          for u in graph.op(t.op).inputs]  # (B/m, T, ·) each
                    saved: dict = {}
                    with saved_tensors_hooks(_recorder(saved, owned[t.op]), lambda x: x):
                        t0 = time.perf_counter()
                        out = modules[t.op](*xs)
                    leaves[t.op, t.mb], outs[t.op, t.mb] = xs, out
                    if t.op == "head":
                        loss += out.item() / graph.microbatches
                else:
                    grad = gacc.pop((t.op, t.mb), None)  # local consumers' share, (B/m, T, ·)
                    for d in sorted({place[v] for v in graph.consumers(t.op)} - {rank}):
                        g = posted[("grad", t.op, t.mb, d)].wait()  # (B/m, T, ·) from rank d
                        grad = g if grad is None else grad + g
                    if t.op == "head":
                        grad = torch.tensor(1.0 / graph.microbatches)  # d(mean over m)/d(loss_k)
                    t0 = time.perf_counter()
                    outs.pop((t.op, t.mb)).backward(grad)
                    for u, x in zip(graph.op(t.op).inputs, leaves.pop((t.op, t.mb))):
                        if u not in DATA:
                            key = (u, t.mb)
                            gacc[key] = x.grad if key not in gacc else gacc[key] + x.grad
                t1 = time.perf_counter()
                if t.kind == "F":  # what this rank holds now: every live F's saved tensors
                    saved[tensor_key(out)] = out.numel() * out.element_size()
                    live[t.op, t.mb] = saved
                    union = {k: b for held in live.values() for k, b in held.items()}
                    peak[step] = max(peak[step], sum(union.values()))
                else:
                    live.pop((t.op, t.mb))
                events.append({"rank": rank, "kind": "compute",
                               "name": "forward" if t.kind == "F" else "backward",
                               "t0": t0, "t1": t1, "args": {"step": step, "task": tuple(t)}})
                for msg in after.get(t, ()):  # (B/m, T, ·) activation or gradient
                    sender.send((outs[t.op, t.mb] if msg.kind == "act" else gacc.pop(
                        (msg.op, msg.mb))).detach(), msg)
            t_end = time.perf_counter()
            sender.flush()
            for h in posted.values():
                h.wait()
        if grads is None:
            grads = {f"{n}.{k}": p.grad.detach().clone() for n in mine
                     for k, p in modules[n].named_parameters()}
        if opt is not None:
            opt.step()
            opt.zero_grad()
        losses.append(loss if place["head"] == rank else None)
        marks.append((t_start, t_end))
    state = {f"{n}.{k}": p.detach().clone() for n in mine for k, p in modules[n].named_parameters()}
    return {"losses": losses, "state": state, "grads": grads, "events": events, "marks": marks,
            "ledger": comm.ledger.records, "comm_events": comm.timeline.records(),
            "memory": [weights + p for p in peak]}


def _recorder(saved: dict, owned: set):
    """A saved-tensors pack hook that notes each saved tensor's bytes (parameters left out)."""
    def pack(x):
        if x.data_ptr() not in owned:
            saved[tensor_key(x)] = x.numel() * x.element_size()
        return x
    return pack


@dataclass
class PlacementRun:
    """What a real run of a plan produced: losses, parameters, first-step gradients, the ledger,
    and per step the makespan (first rank's start to the last rank's last task) and busy time."""

    plan: PlacementPlan
    losses: list
    state: dict
    grads: dict
    events: list
    ledger: list
    makespans: list  # seconds, per step
    busy: list  # per step: per rank, seconds of compute
    comm_events: list  # Comm's "comm" (issue to completion) and "wait" (blocked) events
    memory: list = None  # per step: per rank, weights + the most bytes its live forwards saved

    @property
    def makespan(self) -> float:
        """Median over the steps after the first (which pays for warm-up)."""
        return statistics.median(self.makespans[1:] or self.makespans)

    @property
    def bubble(self) -> list[float]:
        """Per rank: median over the steps after the first of the idle fraction 1 − busy/makespan."""
        steps = range(1, len(self.makespans)) if len(self.makespans) > 1 else range(1)
        return [statistics.median(1 - self.busy[s][r] / self.makespans[s] for s in steps)
                for r in range(self.plan.ranks)]

    @property
    def timeline(self) -> list[dict]:
        """Compute, communication and wait events of every rank, for `parlab.viz.timeline`."""
        return self.events + self.comm_events

    def task_seconds(self) -> dict[Task, float]:
        """Each task's duration in this run: the median over the steps after the first."""
        first = 1 if len(self.makespans) > 1 else 0
        seen: dict[Task, list] = {}
        for e in self.events:
            if e["args"]["step"] >= first:
                seen.setdefault(Task(*e["args"]["task"]), []).append(e["t1"] - e["t0"])
        return {t: statistics.median(v) for t, v in seen.items()}

    def sent_bytes(self, step: int = 0) -> list[int]:
        """Bytes each rank sent in `step`, from the ledger."""
        out = [0] * self.plan.ranks
        for rec in self.ledger:
            if rec["step"] == step:
                out[rec["rank"]] += rec["bytes_sent"]
        return out


def run_placement(graph: Graph, plan: PlacementPlan, steps: int = 3, lr: float = 0.1,
                  link: Link | str | None = None, timeout: float = 120.0) -> PlacementRun:
    """Run `plan` for `steps` SGD steps on `plan.ranks` launched ranks (over an emulated `link`)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an int >= 1")
    if set(plan.placement) != set(graph.names):
        raise ValueError(f"plan {plan.name!r} places {sorted(plan.placement)}, "
                         f"not the graph's ops {sorted(graph.names)}")
    results = launch(_worker, plan.ranks, graph, plan, steps, lr, resolve(link), timeout=timeout)
    losses = [sum(r["losses"][s] for r in results if r["losses"][s] is not None)
              for s in range(steps)]
    makespans, busy = [], []
    for s in range(steps):
        t0 = min(r["marks"][s][0] for r in results)
        makespans.append(max(r["marks"][s][1] for r in results) - t0)
        busy.append([sum(e["t1"] - e["t0"] for e in r["events"] if e["args"]["step"] == s)
                     for r in results])
    merged = lambda key: {k: v for r in results for k, v in r[key].items()}  # noqa: E731
    return PlacementRun(plan, losses, merged("state"), merged("grads"),
                        [e for r in results for e in r["events"]],
                        [rec for r in results for rec in r["ledger"]], makespans, busy,
                        [e for r in results for e in r["comm_events"]],
                        [[r["memory"][s] for r in results] for s in range(steps)])


def check_against_reference(graph: Graph, run: PlacementRun, lr: float = 0.1) -> dict:
    """Largest differences from the single-process run (losses, first-step grads, final state)."""
    ref = reference(graph, steps=len(run.losses), lr=lr)
    diff = {"loss": max(abs(a - b) for a, b in zip(run.losses, ref["losses"])),
            "grad": max((run.grads[k] - g).abs().max().item() for k, g in ref["grads"].items()),
            "param": max((run.state[k] - p).abs().max().item() for k, p in ref["state"].items())}
    diff["match"] = all(v <= 1e-4 for v in diff.values())
    return diff


__all__ = ["Message", "messages", "message_bytes", "pipeline_plan", "run_placement",
           "PlacementRun", "check_against_reference"]
