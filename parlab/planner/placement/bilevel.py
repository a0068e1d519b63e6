"""The paper's decomposition beside the monolithic MILP: merge operators, place the merged graph,
then order every operator with that placement fixed.

She et al. (2025, arXiv 2503.09357, abstract) solve their scheduling MIP with "a bi-level solution
framework balancing optimality with computational efficiency": operators merged into larger ones,
the MIP solved on the smaller graph. The structure is followed; the merging rule is ours
(`merge_ops`: contract the edge whose message costs most against the merged group's work, keeping
the graph acyclic and the group within the cap; `coarsen`), then the MILP on the merged graph
(`expand`: its placement), then our lower level: `milp.build_milp(..., fixed=...)` orders every op
with that placement fixed, never worse than the merged plan. The price is optimality (tests: it
never beats the exhaustive search). In full: docs/planner.md, `parlab.planner.placement.bilevel`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from parlab.core.link import Link, resolve
from parlab.planner.placement.measured_graph import Graph
from parlab.planner.placement.milp import milp_plan
from parlab.planner.placement.op_costs import Memory, OpGraph, measure_memory, memory_of, op_graph
from parlab.planner.placement.tasks import (
    PlacementPlan,
    Task,
    evaluate,
    message_seconds,
    split_backward,
    wire_of,
)


def _group_edges(graph, group_of: dict) -> dict:
    """{(G, H): bytes} between distinct groups: each producer's activation once per consumer
    group (what the executor sends: one message per producer and destination)."""
    seen, out = set(), {}
    for u, v, n in graph.edges():
        g, h = group_of[u], group_of[v]
        if g != h and (u, h) not in seen:
            seen.add((u, h))
            out[g, h] = out.get((g, h), 0) + n
    return out


def _reaches(edges: dict, start, goal, skip) -> bool:
    """Is `goal` reachable from `start` without the direct edge `skip`?"""
    succ: dict = {}
    for g, h in edges:
        if (g, h) != skip:
            succ.setdefault(g, []).append(h)
    stack, seen = [start], {start}
    while stack:
        for h in succ.get(stack.pop(), ()):
            if h == goal:
                return True
            if h not in seen:
                seen.add(h)
                stack.append(h)
    return False


def merge_ops(graph, groups: int, link: Link | None = None, memory: Memory | None = None,
              cap: float | None = None) -> list[tuple[str, ...]]:
    """The upper level's heuristic (module docstring): groups of ops, each in topological order,
    at most `groups` of them where contractions allow."""
    names = list(graph.names)
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= len(names):
        raise ValueError(f"groups={groups!r} must be an int in 1..{len(names)}")
    fwd, bwd = graph.times()
    if split_backward(graph):  # a group's work counts its weight gradients too
        bwd = {n: bwd[n] + w for n, w in graph.wtimes().items()}
    members = {n: [n] for n in names}  # group id (its first op) -> ops
    group_of = {n: n for n in names}
    while len(members) > groups:
        edges = _group_edges(graph, group_of)
        best = None
        for (g, h), nbytes in edges.items():
            if _reaches(edges, g, h, (g, h)):
                continue  # another path g → … → h: merging would make a cycle
            merged = members[g] + members[h]
            if cap is not None and sum(memory.w[n] + memory.a[n] for n in merged) > cap:
                continue
            score = message_seconds(nbytes, link, wire_of(graph)) / sum(fwd[n] + bwd[n] for n in merged)
            key = (score, -names.index(members[g][0]), -names.index(members[h][0]))
            if best is None or key > best[0]:
                best = (key, g, h)
        if best is None:
            break  # nothing left to contract
        _, g, h = best
        members[g] = sorted(members[g] + members.pop(h), key=names.index)
        for n in members[g]:
            group_of[n] = g
    return sorted((tuple(ops) for ops in members.values()), key=lambda ops: names.index(ops[0]))


def coarsen(graph, merged: list[tuple[str, ...]], memory: Memory | None = None):
    """The merged graph (`OpGraph`, ops in topological order) and its memory (sums)."""
    names = list(graph.names)
    gname = {ops: "+".join(ops) for ops in merged}
    group_of = {n: gname[ops] for ops in merged for n in ops}
    edges = _group_edges(graph, group_of)
    order, left = [], [gname[ops] for ops in merged]
    while left:  # Kahn's algorithm, ties by the first member's position
        free = [g for g in left if not any(h == g and f in left for f, h in edges)]
        g = min(free, key=lambda g: names.index(g.split("+")[0]))
        order.append(g)
        left.remove(g)
    fwd, bwd = graph.times()
    ops_of = {gname[ops]: ops for ops in merged}
    wts = graph.wtimes() if split_backward(graph) else None
    coarse = op_graph([(g, h, n) for (g, h), n in edges.items()],
                      {g: sum(fwd[n] for n in ops_of[g]) for g in order},
                      {g: sum(bwd[n] for n in ops_of[g]) for g in order}, graph.microbatches,
                      weight_s=None if wts is None else
                      {g: sum(wts[n] for n in ops_of[g]) for g in order},
                      wire=getattr(graph, "wire", None))
    if memory is None:
        return coarse, None
    return coarse, memory_of({g: sum(memory.w[n] for n in ops_of[g]) for g in order},
                             {g: sum(memory.a[n] for n in ops_of[g]) for g in order})


def expand(graph, coarse_plan: PlacementPlan, merged: list[tuple[str, ...]]) -> PlacementPlan:
    """The merged plan on the unmerged graph: each op on its group's rank; a group's F becomes
    its members' forwards in topological order, its B their backwards in reverse."""
    ops_of = {"+".join(ops): ops for ops in merged}
    place = {n: r for g, r in coarse_plan.place for n in ops_of[g]}
    order = []
    for seq in coarse_plan.order:
        fine = []
        for t in seq:
            ops = ops_of[t.op] if t.kind == "F" else ops_of[t.op][::-1]  # B and W: reversed
            fine += [Task(t.kind, n, t.mb) for n in ops]
        order.append(tuple(fine))
    return PlacementPlan("merged", coarse_plan.ranks, tuple((n, place[n]) for n in graph.names),
                         tuple(order), status=coarse_plan.status)


@dataclass(frozen=True)
class Bilevel:
    """The decomposition's answer and what each level did."""

    plan: PlacementPlan  # the lower level's plan on the unmerged graph
    merged: tuple  # the groups
    coarse: PlacementPlan  # the merged graph's plan (upper level)
    upper_objective: float  # the merged plan expanded, timed on the unmerged graph (seconds)
    upper_s: float
    lower_s: float
    upper_model: str
    lower_model: str

    @property
    def solve_s(self) -> float:
        return self.upper_s + self.lower_s


def bilevel(graph: Graph | OpGraph, ranks: int, link: Link | str | None = None,
            groups: int | None = None, memory_cap: float | None = None,
            memory: Memory | None = None, time_limit: float = 30.0) -> Bilevel:
    """Merge to at most `groups` ops (default: half of them, at least `ranks`), place the merged
    graph by the MILP, then order every op with that placement fixed (module docstring)."""
    link = resolve(link)
    names = graph.names
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= len(names):
        raise ValueError(f"ranks={ranks!r} must be an int in 1..{len(names)} (one op each)")
    groups = max(ranks, (len(names) + 1) // 2) if groups is None else groups
    if memory_cap is not None and memory is None:
        memory = measure_memory(graph)
    t0 = time.perf_counter()
    merged = merge_ops(graph, groups, link, memory, memory_cap)
    coarse, coarse_memory = coarsen(graph, merged, memory if memory_cap is not None else None)
    upper = milp_plan(coarse, min(ranks, len(merged)), link, time_limit, coarse_memory, memory_cap,
                      name="merged")
    if upper.ranks < ranks:  # fewer groups than ranks: the others stay idle
        upper = PlacementPlan(upper.name, ranks, upper.place, upper.order + ((),) * (
            ranks - upper.ranks), upper.objective, upper.status, upper.solve_s, upper.model)
    start = expand(graph, upper, merged)
    start_timing = evaluate(graph, start, link)
    start = PlacementPlan("merged", ranks, start.place, start.order, start_timing.makespan,
                          start.status)
    t1 = time.perf_counter()
    plan = milp_plan(graph, ranks, link, time_limit, memory, memory_cap, start.placement,
                     name="bilevel", upper=start)
    t2 = time.perf_counter()
    lower_model = plan.model
    timed = evaluate(graph, plan, link).makespan  # the order timed exactly (solver tolerances)
    if timed >= start.objective:
        plan, timed = PlacementPlan(plan.name, ranks, start.place, start.order, start.objective,
                                    plan.status + " (no better than the merged plan: kept)",
                                    plan.solve_s, plan.model), start.objective
    merged_text = ", ".join("+".join(ops) for ops in merged if len(ops) > 1) or "nothing"
    status = (f"merged {merged_text} ({len(merged)} groups); upper: {upper.status}; "
              f"lower: {plan.status}")
    plan = PlacementPlan("bilevel", ranks, plan.place, plan.order, timed, status, t2 - t0,
                         plan.model)
    return Bilevel(plan, tuple(merged), upper, start_timing.makespan, t1 - t0, t2 - t1,
                   upper.model, lower_model)
