"""Operator placement as a mixed-integer program (She et al., "Automatic Operator-level
Parallelism Planning for Distributed Deep Learning — A Mixed-Integer Programming Approach", 2025,
arXiv 2503.09357), and `solve`, the entry point that picks it or the exhaustive search.

The problem is `parlab.planner.placement`'s: a binary x[op, rank] puts each op on one rank; a
start time s[task] for every F and B task; precedence constraints s[v] ≥ s[u] + d[u] (+ one
message, α + n/β, where u and v may sit on different ranks); disjunctive no-overlap constraints
with big-M for every pair of tasks that may share a rank and are not already ordered; the
makespan C ≥ s + d of every task is minimised. The big-M is `greedy`'s makespan, an upper bound.
`scipy.optimize.milp` (HiGHS) solves it; the answer is a `PlacementPlan` like the exhaustive search's,
and the two must agree (`tests/test_planner_placement.py`).
"""

from __future__ import annotations

import time

import numpy as np

from parlab.core.link import Link
from parlab.planner.graph import Graph
from parlab.planner.placement import (
    PlacementPlan,
    durations,
    exhaustive,
    greedy,
    message_seconds,
    plan_from_starts,
    precedences,
    tasks,
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
        a = np.zeros((len(self.rows), len(self.names)))
        for i, (coeffs, _, _, _) in enumerate(self.rows):
            for j, c in coeffs.items():
                a[i, j] += c
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


def build_milp(graph: Graph, ranks: int, link: Link | None = None, upper: PlacementPlan | None = None):
    """The placement-and-order MILP; returns (model, x[op][r], s[task], C). `upper`: a plan
    whose makespan bounds the optimum (default: `greedy`)."""
    all_tasks, dur, prec = tasks(graph), durations(graph), precedences(graph)
    ms = {t: 1e3 * d for t, d in dur.items()}
    msg = {(a, b): 1e3 * message_seconds(n, link) for a, b, n in prec if n is not None}
    # Big-M: the best greedy schedule (`greedy`) ends by H, so an optimal one does too; bounding
    # every start and C by H keeps the optimum and tightens the relaxation.
    upper = greedy(graph, ranks, link) if upper is None else upper
    horizon = 1e3 * upper.objective * (1 + 1e-9)
    m = MilpModel()
    x = {n: [m.var(f"x[{n},r{r}]", 0, 1, True) for r in range(ranks)] for n in graph.names}
    s = {t: m.var(f"s[{t}]", 0, horizon) for t in all_tasks}
    cmax = m.var("C", 0, horizon)
    m.lb[x[graph.names[0]][0]] = 1  # symmetry: the first op on rank 0
    for n in graph.names:
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
    for i, a in enumerate(all_tasks):
        for b in all_tasks[i + 1:]:
            if b in after[a] or a in after[b]:
                continue  # ordered by precedence already
            y = m.var(f"y[{a}<{b}]", 0, 1, True)  # 1: a before b when they share a rank
            if a.op == b.op:  # one op: always the same rank
                m.add({s[b]: 1, s[a]: -1, y: -horizon}, ms[a] - horizon, np.inf, "no overlap")
                m.add({s[a]: 1, s[b]: -1, y: horizon}, ms[b], np.inf, "no overlap")
                continue
            for r in range(ranks):  # s_b ≥ s_a + d_a − M(1 − y) − M(2 − x_ar − x_br), and mirror
                xa, xb = x[a.op][r], x[b.op][r]
                m.add({s[b]: 1, s[a]: -1, y: -horizon, xa: -horizon, xb: -horizon},
                      ms[a] - 3 * horizon, np.inf, "no overlap")
                m.add({s[a]: 1, s[b]: -1, y: horizon, xa: -horizon, xb: -horizon},
                      ms[b] - 2 * horizon, np.inf, "no overlap")
    for t in all_tasks:
        m.add({cmax: 1, s[t]: -1}, ms[t], np.inf, "makespan")
    load = {n: sum(ms[t] for t in all_tasks if t.op == n) for n in graph.names}
    for r in range(ranks):  # implied by no-overlap, but it gives the LP relaxation a real bound
        m.add({cmax: 1, **{x[n][r]: -load[n] for n in graph.names}}, 0, np.inf, "rank load (cut)")
    return m, x, s, cmax


def milp_plan(graph: Graph, ranks: int, link: Link | None = None,
              time_limit: float = 30.0) -> PlacementPlan:
    """Solve the MILP with scipy.optimize.milp (HiGHS); the plan orders each rank by start time."""
    t0 = time.perf_counter()
    upper = greedy(graph, ranks, link)
    model, x, s, cmax = build_milp(graph, ranks, link, upper)
    res = model.solve(cmax, time_limit)
    info = dict(solve_s=time.perf_counter() - t0, model=model.text())
    if res.x is None or res.status != 0 and res.x[cmax] / 1e3 >= upper.objective:
        # stopped at the time limit before it beat the greedy plan: keep that one, say so
        return PlacementPlan("milp", ranks, upper.place, upper.order, upper.objective,
                    f"stopped at {time_limit:g} s ({res.message}): the greedy plan", **info)
    place = {n: int(np.argmax([res.x[i] for i in x[n]])) for n in graph.names}
    start = {t: res.x[i] / 1e3 for t, i in s.items()}
    gap = getattr(res, "mip_gap", None)
    status = ("optimal" if res.status == 0 else f"stopped at {time_limit:g} s") + (
        f", gap {gap:.1e}" if gap is not None else "")
    return plan_from_starts(graph, "milp", ranks, place, start, objective=res.x[cmax] / 1e3,
                            status=status, **info)


def solve(graph: Graph, ranks: int, link: Link | str | None = None, method: str = "milp",
          time_limit: float = 30.0) -> PlacementPlan:
    """The fastest placement and order of `graph`'s step on `ranks` ranks over `link`."""
    from parlab.core.link import resolve
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= len(graph.names):
        raise ValueError(f"ranks={ranks!r} must be an int in 1..{len(graph.names)} (one op each)")
    if method not in ("milp", "exhaustive"):
        raise ValueError(f"method={method!r} must be 'milp' or 'exhaustive'")
    link = resolve(link)
    graph.times()  # ValueError now if the op times were never measured
    if method == "exhaustive":
        return exhaustive(graph, ranks, link)
    return milp_plan(graph, ranks, link, time_limit)
