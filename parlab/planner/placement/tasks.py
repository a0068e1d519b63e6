"""Operator placement and order, solved exactly: a mixed-integer program and an exhaustive search.

She et al., "Automatic Operator-level Parallelism Planning for Distributed Deep Learning — A
Mixed-Integer Programming Approach" (2025, arXiv 2503.09357) pose parallelism planning as a
scheduling problem solved by mixed-integer programming: put every operator of a graph on a device
and order the work on each device so that a training step (forward and backward of m
micro-batches) ends as early as possible, under each device's memory capacity. The problem here,
for R ranks:

- tasks: F(op, k) and B(op, k) for every op and micro-batch k, lasting the op's MEASURED forward /
  backward time (`parlab.planner.graph.profile`); B(op, k) runs where F(op, k) ran (it needs the
  saved activations and the op's weights), so a placement is one rank per op.
- precedence: an edge u → v orders F(u,k) before F(v,k) and B(v,k) before B(u,k); F(op,k) before
  B(op,k); micro-batches pass each op in order (F(op,k) before F(op,k+1), the same for B: a
  modelling choice, the executors' too). An edge whose ends are on different ranks delays the
  consumer by one message, α + n/β (Hockney; `message_seconds`).
- no overlap: two tasks on one rank do not run at once (disjunctive constraints with big-M).
- memory (`Memory`, optional cap): a rank holds the weights of its ops (parameters and their
  gradients, all step) and, from the start of F(op, k) to the end of B(op, k), what that forward
  saved for its backward (`measure_memory`: the tensors autograd saves, measured once); at every
  moment the sum must fit the cap. Memory only grows when an F starts, so it is checked there
  (`peak_memory`; the costs and memory of a graph: `parlab.planner.placement_costs`).
- objective: the makespan C ≥ end of every task.
- a graph may split the backward (`split_backward`: B then W(op, k) on the op's rank, W holding
  the activations until it ends, as zero bubble and DualPipe do), route only some micro-batches
  through an op (`micro_of`: DualPipe's two model copies) and name its own wire (`wire_of`): the
  real layers of `parlab.planner.layer_graph`.

`exhaustive` enumerates every placement (up to renaming ranks) and every order (the orders a
topological order of the tasks induces on each rank; each is timed as soon as possible, which is
optimal for that order), skipping those that overflow the cap; `greedy` list-schedules a good
placement, an upper bound. The mixed-integer program and `solve`, which picks either, are
`parlab.planner.placement_milp`; the paper's bi-level decomposition is
`parlab.planner.placement_bilevel`; the MILP, the decomposition and the exhaustive search are
checked against each other. The answer is DATA, a `PlacementPlan` (per-rank lists of tasks, like
`parlab.pipeline.schedules`), timed by `evaluate`, run by the "placed" scheme
(`parlab.planner.placed`), drawn by `parlab.planner.explore.placement`: one source. Any graph
with `names`, `edges()`, `microbatches` and `times()` can be planned: the chapter's branchy model
(`parlab.planner.graph.Graph`) or an `OpGraph` of given costs (tests, and the decomposition's merged graphs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

from parlab.core.link import Link
from parlab.planner.graph import Graph
from parlab.planner.placement_costs import (  # noqa: F401  (re-exported: one place to import from)
    Memory,
    OpGraph,
    measure_memory,
    memory_of,
    op_graph,
    peak_memory,
    tensor_key,
)

# A send/recv of n bytes between two ranks of this machine, as docs/measurements.md measured it:
# ~0.1 ms per message (one ring round of a hand-written algorithm) and 2.3–2.5 GB/s one way.
LOOPBACK_P2P = Link(1e-4, 2.4e9, "loopback send/recv (docs/measurements.md)")


def message_seconds(nbytes: float, link: Link | None = None, base: Link = LOOPBACK_P2P) -> float:
    """One message of `nbytes` between ranks: the wire's own α + n/β (`base`: loopback here, a
    graph's `wire` where it names one, `wire_of`), plus the emulated link's."""
    return base.cost(nbytes) + (link.cost(nbytes) if link is not None else 0.0)


def wire_of(graph) -> Link:
    """The wire a graph's messages cross: its `wire` (a priced graph at a real accelerator,
    `parlab.planner.layer_graph`) or this machine's loopback."""
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


# ----------------------------------------------------------------------------- exhaustive
def _placements(n_ops: int, ranks: int):
    """Every map of ops to ranks up to renaming the ranks (rank labels in order of first use)."""
    def grow(prefix, used):
        if len(prefix) == n_ops:
            yield tuple(prefix)
            return
        for r in range(min(used + 1, ranks)):
            yield from grow(prefix + [r], max(used, r + 1))
    yield from grow([], 0)


def _topological_orders(nodes: list, preds: dict):
    order, done = [], set()

    def rec():
        if len(order) == len(nodes):
            yield tuple(order)
            return
        for t in nodes:
            if t not in done and all(p in done for p in preds[t]):
                done.add(t)
                order.append(t)
                yield from rec()
                order.pop()
                done.discard(t)
    yield from rec()


MAX_EXHAUSTIVE_TASKS = 16


def _fits(weights: dict, place: dict, ranks: int, cap: float | None) -> bool:
    if cap is None:
        return True
    load = [0.0] * ranks
    for n, r in place.items():
        load[r] += weights[n]
    return max(load) <= cap


def exhaustive(graph: Graph, ranks: int, link: Link | None = None, memory: Memory | None = None,
               cap: float | None = None, place: dict | None = None) -> PlacementPlan:
    """The optimal plan by enumeration: placements × the orders of a topological order of tasks,
    those that hold more than `cap` bytes on a rank (`Memory`) left out; `place`: only that
    placement (the best order for it). ValueError when no plan fits the cap."""
    all_tasks, dur = tasks(graph), durations(graph)
    if len(all_tasks) > MAX_EXHAUSTIVE_TASKS:
        raise ValueError(f"exhaustive search is for ≤ {MAX_EXHAUSTIVE_TASKS} tasks; this graph has "
                         f"{len(all_tasks)} (microbatches={graph.microbatches}): use method='milp'")
    if cap is not None and memory is None:
        raise ValueError("a memory cap needs the ops' memory (memory=Memory)")
    t0 = time.perf_counter()
    prec = precedences(graph)
    preds = {t: [a for a, b, _ in prec if b == t] for t in all_tasks}
    orders = list(_topological_orders(all_tasks, preds))
    idx = {t: i for i, t in enumerate(all_tasks)}
    d = [dur[t] for t in all_tasks]
    ops = list(graph.names)
    w = memory.w if memory is not None else dict.fromkeys(ops, 0.0)
    act = [memory.a[t.op] if memory is not None else 0.0 for t in all_tasks]
    grow = [t.kind == "F" for t in all_tasks]
    frees = [t.kind == release(graph) for t in all_tasks]
    assigns = [tuple(place[n] for n in ops)] if place is not None else _placements(len(ops), ranks)
    best, best_start, best_place, evaluated = float("inf"), None, None, 0
    for assign in assigns:
        where = dict(zip(ops, assign))
        if not _fits(w, where, ranks, cap):
            continue
        rank = [where[t.op] for t in all_tasks]
        base = [0.0] * ranks
        for n, r in where.items():
            base[r] += w[n]
        inc = [[(idx[a], message_seconds(n, link, wire_of(graph))
                 if n is not None and where[a.op] != where[b.op]
                 else 0.0) for a, b, n in prec if b == t] for t in all_tasks]
        for order in orders:
            free, end, held = [0.0] * ranks, [0.0] * len(all_tasks), list(base)
            fits = True
            for t in order:
                i = idx[t]
                r = rank[i]
                if cap is not None:
                    held[r] += act[i] if grow[i] else -act[i] if frees[i] else 0.0
                    if grow[i] and held[r] > cap * (1 + 1e-12):
                        fits = False
                        break
                s = max([free[r]] + [end[j] + c for j, c in inc[i]])
                end[i] = free[r] = s + d[i]
            evaluated += 1
            if not fits:
                continue
            span = max(end)
            if span < best - 1e-12:
                best, best_place = span, where
                best_start = {t: end[idx[t]] - d[idx[t]] for t in all_tasks}
    if best_place is None:
        raise ValueError(f"no plan of {ranks} ranks holds at most memory_cap={cap:,.0f} bytes per "
                         "rank")
    return plan_from_starts(graph, "exhaustive", ranks, best_place, best_start, objective=best,
                            status=f"optimal ({evaluated:,} schedules)",
                            solve_s=time.perf_counter() - t0)


def list_schedule(graph: Graph, place: dict, link: Link | None = None,
                  memory: Memory | None = None, cap: float | None = None) -> dict[Task, float] | None:
    """Start times of a greedy list schedule for one placement: repeatedly start the task that can
    start earliest (ties: the longest path still ahead of it first). Under a memory cap an F starts
    only if its activations fit beside what its rank holds; None if that leaves every rank stuck.
    Not optimal; fast."""
    dur, prec = durations(graph), precedences(graph)
    preds = {t: [] for t in dur}
    succs = {t: [] for t in dur}
    for a, b, n in prec:
        c = message_seconds(n, link, wire_of(graph)) if n is not None and \
            place[a.op] != place[b.op] else 0.0
        preds[b].append((a, c))
        succs[a].append((b, c))
    ahead: dict[Task, float] = {}
    for t in reversed(tasks(graph)):  # the longest path from t's start to the end of the step
        ahead[t] = dur[t] + max((c + ahead[b] for b, c in succs[t]), default=0.0)
    held = dict.fromkeys(set(place.values()), 0.0)
    if cap is not None:
        for n, r in place.items():
            held[r] += memory.w[n]
    free, start, end = {}, {}, {}

    def earliest(t):
        return max([free.get(place[t.op], 0.0)] + [end[p] + c for p, c in preds[t]])

    def room(t):
        return cap is None or t.kind != "F" or held[place[t.op]] + memory.a[t.op] <= cap

    while len(start) < len(dur):
        ready = [t for t in dur if t not in start and all(p in end for p, _ in preds[t]) and room(t)]
        if not ready:
            return None
        t = min(ready, key=lambda t: (earliest(t), -ahead[t]))
        start[t] = earliest(t)
        end[t] = free[place[t.op]] = start[t] + dur[t]
        if cap is not None:
            held[place[t.op]] += memory.a[t.op] if t.kind == "F" else \
                -memory.a[t.op] if t.kind == release(graph) else 0.0
    return start


def greedy(graph: Graph, ranks: int, link: Link | None = None, memory: Memory | None = None,
           cap: float | None = None, place: dict | None = None) -> PlacementPlan | None:
    """The best greedy list schedule over every placement (up to renaming ranks; `place`: only
    that one) within the memory cap: an upper bound on the optimum, and the MILP's big-M. None
    when no list schedule fits the cap."""
    best, dur = None, durations(graph)
    w = memory.w if memory is not None else {}
    assigns = [tuple(place[n] for n in graph.names)] if place is not None else \
        _placements(len(graph.names), ranks)
    for assign in assigns:
        where = dict(zip(graph.names, assign))
        if not _fits(w, where, ranks, cap):
            continue
        start = list_schedule(graph, where, link, memory, cap)
        if start is None:
            continue
        span = max(start[t] + d for t, d in dur.items())
        if best is None or span < best[0]:
            best = (span, where, start)
    if best is None:
        return None
    return plan_from_starts(graph, "greedy", ranks, best[1], best[2], objective=best[0],
                            status="list schedule (an upper bound)")


def serial_bound(graph: Graph, link: Link | None = None) -> float:
    """An upper bound on the optimal makespan whatever the cap: every task and every message one
    after the other (a schedule started as early as its order allows is a chain of them)."""
    return sum(durations(graph).values()) + sum(
        message_seconds(n, link, wire_of(graph)) for _, _, n in precedences(graph) if n is not None)
