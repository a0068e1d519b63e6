"""Operator placement as a mixed-integer program (She et al., "Automatic Operator-level
Parallelism Planning for Distributed Deep Learning — A Mixed-Integer Programming Approach", 2025,
arXiv 2503.09357), and `solve`, the entry point that picks it or the exhaustive search.

A binary x[op, rank] puts each op on one rank, a start s[task] for every F and B (and W) task;
precedence s[v] ≥ s[u] + d[u] (+ one α + n/β message across ranks); no overlap on a rank by
big-M disjunctions y[a<b]; memory checked where it grows, at the start of every F (the paper's
memory constraints, `op_costs.Memory`); minimise the makespan C. With `fixed` a placement only
pairs on one rank are ordered: the lower level of `placement.bilevel`. `scipy.optimize.milp`
(HiGHS) solves it; the answer is a `PlacementPlan` that must agree with `exhaustive`. The
constraints in full: docs/planner.md, `parlab.planner.placement.milp`.
"""

from __future__ import annotations

import time

import numpy as np

from parlab.core.link import Link
from parlab.planner.placement.exhaustive import exhaustive, greedy, serial_bound
from parlab.planner.placement.measured_graph import Graph
from parlab.planner.placement.op_costs import Memory, measure_memory
from parlab.planner.placement.tasks import (
    PlacementPlan,
    Task,
    durations,
    message_seconds,
    micro_of,
    plan_from_starts,
    precedences,
    release,
    tasks,
    wire_of,
)


class MilpModel:
    """A MILP written as readable rows: variables with bounds, constraints lo ≤ Σ c·v ≤ hi.
    Times are in milliseconds inside the model (solver tolerances are absolute)."""

    def __init__(self):
        self.names, self.lb, self.ub, self.integer, self.rows = [], [], [], [], []

    def var(self, name: str, lb: float, ub: float, integer: bool = False) -> int:
        self.names.append(name)
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(integer)
        return len(self.names) - 1

    def add(self, coeffs: dict, lo: float, hi: float, family: str) -> None:
        self.rows.append((coeffs, lo, hi, family))

    def row_text(self, row) -> str:
        coeffs, lo, hi, family = row
        terms = " ".join(f"{'+' if c >= 0 else '-'} {abs(c):g}·{self.names[i]}"
                         for i, c in coeffs.items()).lstrip("+ ")
        bound = (f"= {lo:g}" if lo == hi else f"≥ {lo:g}" if hi == np.inf else f"≤ {hi:g}")
        return f"[{family}] {terms} {bound}"

    def text(self, per_family: int = 2) -> str:
        """Counts of variables and constraints by family, and the first rows of each family."""
        binaries = sum(self.integer)
        lines = [f"variables: {len(self.names)} ({binaries} binary, "
                 f"{len(self.names) - binaries} continuous); constraints: {len(self.rows)}"]
        families: dict[str, list] = {}
        for row in self.rows:
            families.setdefault(row[3], []).append(row)
        for family, rows in families.items():
            lines.append(f"  {family}: {len(rows)} rows, e.g.")
            lines += [f"    {self.row_text(r)}" for r in rows[:per_family]]
        lines.append("  minimise C (the makespan, ms)")
        return "\n".join(lines)

    def solve(self, objective: int, time_limit: float):
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix
        rows, cols, vals = [], [], []
        for i, (coeffs, _, _, _) in enumerate(self.rows):
            for j, c in coeffs.items():
                rows.append(i)
                cols.append(j)
                vals.append(c)
        a = coo_matrix((vals, (rows, cols)), shape=(len(self.rows), len(self.names))).tocsr()
        c = np.zeros(len(self.names))
        c[objective] = 1.0
        return milp(c, integrality=np.array(self.integer, dtype=int),
                    bounds=Bounds(self.lb, self.ub),
                    constraints=LinearConstraint(a, [r[1] for r in self.rows],
                                                 [r[2] for r in self.rows]),
                    options={"time_limit": time_limit, "mip_rel_gap": 1e-7})


def _reachable(all_tasks: list, prec) -> dict:
    """For each task, every task that must come after it (transitive closure of precedence)."""
    succ = {t: [b for a, b, _ in prec if a == t] for t in all_tasks}
    after: dict = {}
    for t in reversed(all_tasks):  # `all_tasks` is topological: successors come first here
        after[t] = set()
        for s in succ[t]:
            after[t] |= {s} | after[s]
    return after


def build_milp(graph: Graph, ranks: int, link: Link | None = None, upper: PlacementPlan | None = None,
               memory: Memory | None = None, cap: float | None = None, fixed: dict | None = None):
    """The placement-and-order MILP; returns (model, x[op][r], s[task], C). `upper`: a plan
    whose makespan bounds the optimum (default: `greedy`, else the serial bound); `cap`: bytes per
    rank (`memory` gives the ops' bytes); `fixed`: a placement {op: rank} (order only)."""
    all_tasks, dur, prec = tasks(graph), durations(graph), precedences(graph)
    ms = {t: 1e3 * d for t, d in dur.items()}
    msg = {(a, b): 1e3 * message_seconds(n, link, wire_of(graph)) for a, b, n in prec
           if n is not None}
    # Big-M: the best greedy schedule (`greedy`) ends by H, so an optimal one does too; bounding
    # every start and C by H keeps the optimum and tightens the relaxation.
    if upper is None:
        upper = greedy(graph, ranks, link, memory, cap, fixed)
    bound = upper.objective if upper is not None else serial_bound(graph, link)
    horizon = 1e3 * bound * (1 + 1e-9)
    names = graph.names
    m = MilpModel()
    x = {n: [m.var(f"x[{n},r{r}]", 0, 1, True) for r in range(ranks)] for n in names}
    s = {t: m.var(f"s[{t}]", 0, horizon) for t in all_tasks}
    cmax = m.var("C", 0, horizon)
    if fixed is not None:
        for n in names:
            for r in range(ranks):
                m.lb[x[n][r]] = m.ub[x[n][r]] = float(fixed[n] == r)
    else:
        m.lb[x[names[0]][0]] = 1  # symmetry: the first op on rank 0
    for n in names:
        m.add({x[n][r]: 1 for r in range(ranks)}, 1, 1, "each op on one rank")
    cross = {}
    for u, v, _ in graph.edges():
        w = cross[u, v] = m.var(f"w[{u}→{v}]", 0, 1)  # 1 when u and v sit on different ranks
        for r in range(ranks):
            m.add({w: 1, x[u][r]: -1, x[v][r]: 1}, 0, np.inf, "edge crosses ranks")
    for a, b, n in prec:
        row = {s[b]: 1, s[a]: -1}
        if n is not None:  # s_b ≥ s_a + d_a + message · w
            edge = (a.op, b.op) if a.kind == "F" else (b.op, a.op)
            row[cross[edge]] = -msg[a, b]
        m.add(row, ms[a], np.inf, "precedence")
    after = _reachable(all_tasks, prec)
    y = {}
    for i, a in enumerate(all_tasks):
        for b in all_tasks[i + 1:]:
            if b in after[a] or a in after[b]:
                continue  # ordered by precedence already
            if fixed is not None and fixed[a.op] != fixed[b.op]:
                continue  # never on one rank
            y[a, b] = m.var(f"y[{a}<{b}]", 0, 1, True)  # 1: a before b when they share a rank
            if a.op == b.op or fixed is not None:  # one rank for sure
                m.add({s[b]: 1, s[a]: -1, y[a, b]: -horizon}, ms[a] - horizon, np.inf, "no overlap")
                m.add({s[a]: 1, s[b]: -1, y[a, b]: horizon}, ms[b], np.inf, "no overlap")
                continue
            for r in range(ranks):  # s_b ≥ s_a + d_a − M(1 − y) − M(2 − x_ar − x_br), and mirror
                xa, xb = x[a.op][r], x[b.op][r]
                m.add({s[b]: 1, s[a]: -1, y[a, b]: -horizon, xa: -horizon, xb: -horizon},
                      ms[a] - 3 * horizon, np.inf, "no overlap")
                m.add({s[a]: 1, s[b]: -1, y[a, b]: horizon, xa: -horizon, xb: -horizon},
                      ms[b] - 2 * horizon, np.inf, "no overlap")
    for t in all_tasks:
        m.add({cmax: 1, s[t]: -1}, ms[t], np.inf, "makespan")
    load = {n: sum(ms[t] for t in all_tasks if t.op == n) for n in names}
    for r in range(ranks):  # implied by no-overlap, but it gives the LP relaxation a real bound
        m.add({cmax: 1, **{x[n][r]: -load[n] for n in names}}, 0, np.inf, "rank load (cut)")
    if cap is not None:
        _memory_rows(m, graph, ranks, x, y, after, memory, cap, fixed)
    return m, x, s, cmax


def _memory_rows(m: MilpModel, graph, ranks: int, x: dict, y: dict, after: dict, memory: Memory,
                 cap: float, fixed: dict | None) -> None:
    """Memory at the start of every F fits the cap (module docstring). Bytes in units of the cap
    in the rows (the solver's tolerances are absolute)."""
    names, mb = graph.names, graph.microbatches
    w = {n: v / cap for n, v in memory.w.items()}
    act = {n: v / cap for n, v in memory.a.items()}
    cap_u = 1.0
    big = sum(w.values()) + mb * sum(act.values())
    for r in range(ranks):
        m.add({x[n][r]: w[n] for n in names}, -np.inf, cap_u, "weights fit")

    def order(a, b):  # (constant, {var: coeff}): 1 when a runs before b on their rank
        if b in after[a]:
            return 1.0, {}
        if a in after[b]:
            return 0.0, {}
        if (a, b) in y:
            return 0.0, {y[a, b]: 1.0}
        if (b, a) in y:
            return 1.0, {y[b, a]: -1.0}
        return None  # never on one rank (fixed placement)

    same = {}
    if fixed is None:
        for i, o in enumerate(names):
            for o2 in names[i + 1:]:
                z = same[o, o2] = same[o2, o] = m.var(f"z[{o}~{o2}]", 0, 1)  # 1: one rank
                for r in range(ranks):
                    m.add({z: 1, x[o][r]: -1, x[o2][r]: -1}, -1, np.inf, "same rank")
    free = release(graph)  # the task whose end frees an op's activations (B, or W where split)
    for o in names:
        for k in micro_of(graph, o):
            f = Task("F", o, k)
            const, terms = act[o], {}
            for o2 in names:
                if fixed is not None and fixed[o2] != fixed[o]:
                    continue
                for k2 in micro_of(graph, o2):
                    if (o2, k2) == (o, k):
                        continue
                    e1, e2 = order(Task("F", o2, k2), f), order(f, Task(free, o2, k2))
                    if e1 is None or e2 is None or (not e1[1] and e1[0] == 0) \
                            or (not e2[1] and e2[0] == 0):
                        continue  # o2's micro-batch k2 is never held while f starts
                    one_rank = o2 == o or fixed is not None
                    if one_rank and not e1[1] and not e2[1]:
                        const += act[o2]  # held for sure
                        continue
                    h = m.var(f"h[{f}|{o2}.{k2}]", 0, 1)
                    row = {h: 1.0}
                    for coeffs in (e1[1], e2[1]):
                        for var, c in coeffs.items():
                            row[var] = row.get(var, 0.0) - c
                    low = e1[0] + e2[0] - 1
                    if not one_rank:
                        row[same[o, o2]] = -1.0
                        low -= 1
                    m.add(row, low, np.inf, "held when an F starts")
                    terms[h] = act[o2]
            for r in range(ranks):
                if fixed is not None and fixed[o] != r:
                    continue
                row = {x[n][r]: w[n] for n in names}
                row.update(terms)
                if fixed is None:  # only binds when o sits on r
                    row[x[o][r]] = row[x[o][r]] + big
                    m.add(row, -np.inf, cap_u + big - const, "memory fits")
                else:
                    m.add(row, -np.inf, cap_u - const, "memory fits")


def milp_plan(graph: Graph, ranks: int, link: Link | None = None, time_limit: float = 30.0,
              memory: Memory | None = None, cap: float | None = None,
              fixed: dict | None = None, name: str = "milp",
              upper: PlacementPlan | None = None) -> PlacementPlan:
    """Solve the MILP with scipy.optimize.milp (HiGHS); the plan orders each rank by start time.
    `upper`: a feasible plan whose makespan is the big-M (default: `greedy`'s). ValueError when
    no plan fits the memory cap."""
    t0 = time.perf_counter()
    if upper is None:
        upper = greedy(graph, ranks, link, memory, cap, fixed)
    model, x, s, cmax = build_milp(graph, ranks, link, upper, memory, cap, fixed)
    res = model.solve(cmax, time_limit)
    info = dict(solve_s=time.perf_counter() - t0, model=model.text())
    if res.status == 2:
        raise ValueError(f"no plan of {ranks} ranks holds at most memory_cap={cap:,.0f} bytes "
                         f"per rank ({res.message})")
    if res.x is None and upper is None:
        raise ValueError(f"found no plan within memory_cap={cap:,.0f} bytes per rank in "
                         f"time_limit={time_limit:g} s ({res.message})")
    if res.x is None or res.status != 0 and upper is not None and \
            res.x[cmax] / 1e3 >= upper.objective:
        # stopped at the time limit before it beat the starting plan: keep that one, say so
        return PlacementPlan(name, ranks, upper.place, upper.order, upper.objective,
                             f"stopped at {time_limit:g} s: kept the starting plan ({upper.name})",
                             **info)
    place = {n: int(np.argmax([res.x[i] for i in x[n]])) for n in graph.names}
    start = {t: res.x[i] / 1e3 for t, i in s.items()}
    gap = getattr(res, "mip_gap", None)
    status = ("optimal" if res.status == 0 else f"stopped at {time_limit:g} s") + (
        f", gap {gap:.1e}" if gap is not None else "")
    return plan_from_starts(graph, name, ranks, place, start, objective=res.x[cmax] / 1e3,
                            status=status, **info)


def solve(graph: Graph, ranks: int, link: Link | str | None = None, method: str = "milp",
          time_limit: float = 30.0, memory_cap: float | None = None,
          memory: Memory | None = None) -> PlacementPlan:
    """The fastest placement and order of `graph`'s step on `ranks` ranks over `link`, holding at
    most `memory_cap` bytes per rank (None: no cap; `memory`: the ops' bytes, default measured by
    `measure_memory`)."""
    from parlab.core.link import resolve
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= len(graph.names):
        raise ValueError(f"ranks={ranks!r} must be an int in 1..{len(graph.names)} (one op each)")
    if method not in ("milp", "exhaustive"):
        raise ValueError(f"method={method!r} must be 'milp' or 'exhaustive'")
    if memory_cap is not None and (isinstance(memory_cap, bool) or
                                   not isinstance(memory_cap, (int, float)) or memory_cap <= 0):
        raise ValueError(f"memory_cap={memory_cap!r} must be a positive number of bytes or None")
    link = resolve(link)
    graph.times()  # ValueError now if the op times were never measured
    if memory_cap is not None and memory is None:
        memory = measure_memory(graph)
    if method == "exhaustive":
        return exhaustive(graph, ranks, link, memory, memory_cap)
    return milp_plan(graph, ranks, link, time_limit, memory, memory_cap)
