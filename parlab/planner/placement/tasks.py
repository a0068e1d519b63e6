"""Operator placement and order as data: a graph's tasks, their precedences, a plan and its timing.

She et al., "Automatic Operator-level Parallelism Planning for Distributed Deep Learning — A
Mixed-Integer Programming Approach" (2025, arXiv 2503.09357) pose parallelism planning as
scheduling: put every operator on a device and order each device's work so that a step (forward
and backward of m micro-batches) ends earliest under each device's memory. Here: the tasks F(op, k),
B(op, k) (and W(op, k) where a graph splits the backward: `split_backward`) with the op's measured
times (`durations`), their precedences (an edge between ranks costs one α + n/β message,
`message_seconds`), a `PlacementPlan` (op → rank and each rank's order: DATA, like
`parlab.pipeline.schedules`) and `evaluate`, which times a plan as soon as possible. The problem in
full (memory, micro-batch routes, wires): docs/planner.md, "placement.tasks". Solvers:
`parlab.planner.placement.exhaustive`, `.milp`, `.bilevel`; runtime: `.placed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from parlab.core.link import Link
from parlab.planner.placement.measured_graph import Graph

# A send/recv of n bytes between two ranks of this machine, as docs/measurements.md measured it:
# ~0.1 ms per message (one ring round of a hand-written algorithm) and 2.3–2.5 GB/s one way.
LOOPBACK_P2P = Link(1e-4, 2.4e9, "loopback send/recv (docs/measurements.md)")


def message_seconds(nbytes: float, link: Link | None = None, base: Link = LOOPBACK_P2P) -> float:
    """One message of `nbytes` between ranks: the wire's own α + n/β (`base`: loopback here, a
    graph's `wire` where it names one, `wire_of`), plus the emulated link's."""
    return base.cost(nbytes) + (link.cost(nbytes) if link is not None else 0.0)


def wire_of(graph) -> Link:
    """The wire a graph's messages cross: its `wire` (a priced graph at a real accelerator,
    `parlab.planner.placement.layer_graph`) or this machine's loopback."""
    return getattr(graph, "wire", None) or LOOPBACK_P2P


def split_backward(graph) -> bool:
    """True when the graph's backward is two tasks per op: B (input gradient) then W (weight
    gradient), as zero bubble splits it (Qi et al., ICLR 2024); its activations live until W."""
    return bool(getattr(graph, "split_backward", False))


def micro_of(graph, op: str):
    """The micro-batches `op` computes: all of them, or those routed to it (DualPipe's two model
    copies each take half, `OpGraph.routes`)."""
    routed = getattr(graph, "micro_of", None)
    return routed(op) if routed is not None else range(graph.microbatches)


def release(graph) -> str:
    """The task kind whose end frees an op's activations: W when the backward is split, else B."""
    return "W" if split_backward(graph) else "B"


class Task(NamedTuple):
    kind: str  # "F" forward, "B" backward (input gradient only where split) or "W" weight gradient
    op: str
    mb: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.op}.{self.mb}"


def tasks(graph: Graph) -> list[Task]:
    """Every task of one step, in a topological order."""
    m, names = graph.microbatches, graph.names
    mine = {n: set(micro_of(graph, n)) for n in names}
    out = ([Task("F", n, k) for k in range(m) for n in names if k in mine[n]]
           + [Task("B", n, k) for k in range(m) for n in reversed(names) if k in mine[n]])
    if split_backward(graph):
        out += [Task("W", n, k) for k in range(m) for n in reversed(names) if k in mine[n]]
    return out


def durations(graph: Graph) -> dict[Task, float]:
    fwd, bwd = graph.times()
    by = {"F": fwd, "B": bwd, "W": graph.wtimes() if split_backward(graph) else {}}
    return {t: by[t.kind][t.op] for t in tasks(graph)}


def precedences(graph: Graph) -> list[tuple[Task, Task, int | None]]:
    """(before, after, bytes): `bytes` of the message when the two ops sit on different ranks,
    None where both tasks are of one op (same rank by construction)."""
    out, split = [], split_backward(graph)
    mine = {n: list(micro_of(graph, n)) for n in graph.names}
    for k in range(graph.microbatches):
        for u, v, nbytes in graph.edges():
            if k in mine[u]:
                out.append((Task("F", u, k), Task("F", v, k), nbytes))  # activation (B/m, T, ·)
                out.append((Task("B", v, k), Task("B", u, k), nbytes))  # its gradient, same shape
        for n in graph.names:
            if k not in mine[n]:
                continue
            out.append((Task("F", n, k), Task("B", n, k), None))
            if split:
                out.append((Task("B", n, k), Task("W", n, k), None))
            i = mine[n].index(k)
            if i + 1 < len(mine[n]):  # the op's next micro-batch
                k1 = mine[n][i + 1]
                out.append((Task("F", n, k), Task("F", n, k1), None))
                out.append((Task("B", n, k), Task("B", n, k1), None))
                if split:
                    out.append((Task("W", n, k), Task("W", n, k1), None))
    return out


@dataclass(frozen=True)
class PlacementPlan:
    """A placement (op → rank) and, per rank, the ordered tasks it runs: the schedule as data."""

    name: str
    ranks: int
    place: tuple  # ((op, rank), ...)
    order: tuple  # per rank: tuple of Task in execution order
    objective: float | None = None  # the solver's makespan (seconds), if solved
    status: str = ""
    solve_s: float = 0.0
    model: str = ""  # the MILP, readable (`solve(..., method="milp")`)

    @property
    def placement(self) -> dict[str, int]:
        return dict(self.place)

    def text(self) -> str:
        lines = [f"{self.name}: " + ", ".join(f"{op}→r{r}" for op, r in self.place)]
        lines += [f"  rank {r}: " + " ".join(map(str, seq)) for r, seq in enumerate(self.order)]
        return "\n".join(lines)


@dataclass(frozen=True)
class Timing:
    """When each task starts and ends (seconds from the step's start) under the α-β model."""

    start: dict
    end: dict
    makespan: float
    busy: tuple  # per rank: seconds of compute
    bubble: tuple  # per rank: idle fraction 1 − busy / makespan


def evaluate(graph: Graph, plan: PlacementPlan, link: Link | None = None,
             dur: dict[Task, float] | None = None) -> Timing:
    """Every task as early as its inputs (plus a message where they cross ranks) and its rank's
    previous task allow. ValueError if the plan misses a task or its orders deadlock."""
    dur = durations(graph) if dur is None else dur
    place = plan.placement
    listed = [t for seq in plan.order for t in seq]
    if sorted(listed) != sorted(dur) or any(place[t.op] != r for r, seq in enumerate(plan.order)
                                            for t in seq):
        raise ValueError(f"plan {plan.name!r} does not run every task once on its op's rank")
    preds: dict[Task, list] = {t: [] for t in dur}
    for a, b, nbytes in precedences(graph):
        cross = nbytes is not None and place[a.op] != place[b.op]
        preds[b].append((a, message_seconds(nbytes, link, wire_of(graph)) if cross else 0.0))
    for seq in plan.order:
        for a, b in zip(seq, seq[1:]):
            preds[b].append((a, 0.0))
    start, end, left = {}, {}, dict.fromkeys(dur)
    while left:
        ready = [t for t in left if all(p in end for p, _ in preds[t])]
        if not ready:
            raise ValueError(f"plan {plan.name!r} deadlocks: no task of {len(left)} can start")
        for t in ready:
            start[t] = max([end[p] + c for p, c in preds[t]], default=0.0)
            end[t] = start[t] + dur[t]
            del left[t]
    makespan = max(end.values())
    busy = tuple(sum(dur[t] for t in seq) for seq in plan.order)
    return Timing(start, end, makespan, busy, tuple(1 - b / makespan for b in busy))


def plan_from_starts(graph: Graph, name: str, ranks: int, place: dict, start: dict,
                     **info) -> PlacementPlan:
    """A plan whose per-rank order is the tasks sorted by start time (ties: topological order)."""
    index = {t: i for i, t in enumerate(tasks(graph))}
    order = [sorted((t for t in start if place[t.op] == r), key=lambda t: (start[t], index[t]))
             for r in range(ranks)]
    return PlacementPlan(name, ranks, tuple((n, place[n]) for n in graph.names),
                tuple(tuple(seq) for seq in order), **info)
