"""Operator placement solved by enumeration, and the cheap plans beside it.

She et al. (2025, arXiv 2503.09357) solve placement and order with a mixed-integer program
(`parlab.planner.placement.milp`); on a small graph `exhaustive` checks it: every placement (up
to renaming ranks) × every order a topological order of the tasks induces on each rank, each
timed as soon as possible (optimal for that order), those over the memory cap skipped.
`list_schedule` times one placement greedily, `greedy` keeps the best placement list-scheduled
(an upper bound, and the MILP's start), `serial_bound` is one rank doing everything. The tasks,
the plan and its timing are `parlab.planner.placement.tasks`.
"""

from __future__ import annotations

import time

from parlab.core.link import Link
from parlab.planner.placement.measured_graph import Graph
from parlab.planner.placement.op_costs import Memory
from parlab.planner.placement.tasks import (
    PlacementPlan,
    Task,
    durations,
    message_seconds,
    plan_from_starts,
    precedences,
    release,
    tasks,
    wire_of,
)


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
