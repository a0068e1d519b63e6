"""Operator placement and order, solved exactly: a mixed-integer program and an exhaustive search.

She et al., "Automatic Operator-level Parallelism Planning for Distributed Deep Learning — A
Mixed-Integer Programming Approach" (2025, arXiv 2503.09357): put every operator of a graph on a
device and order the work on each device so that a training step (forward and backward of m
micro-batches) ends as early as possible. The problem here, for R ranks:

- tasks: F(op, k) and B(op, k) for every op and micro-batch k, lasting the op's MEASURED forward /
  backward time (`parlab.planner.graph.profile`); B(op, k) runs where F(op, k) ran (it needs the
  saved activations and the op's weights), so a placement is one rank per op.
- precedence: an edge u → v orders F(u,k) before F(v,k) and B(v,k) before B(u,k); F(op,k) before
  B(op,k); micro-batches pass each op in order (F(op,k) before F(op,k+1), the same for B: a
  modelling choice, the executors' too). An edge whose ends are on different ranks delays the
  consumer by one message, α + n/β (Hockney; `message_seconds`).
- no overlap: two tasks on one rank do not run at once (disjunctive constraints with big-M).
- objective: the makespan C ≥ end of every task.

`solve(graph, ranks, link)` builds and solves it with `scipy.optimize.milp` (HiGHS);
`solve(..., method="exhaustive")` enumerates every placement (up to renaming ranks) and every
order (the orders a topological order of the tasks induces on each rank; each is timed as soon as
possible, which is optimal for that order), so the two must agree. The answer is DATA, a `Plan`
(per-rank lists of tasks, like `parlab.pipeline.schedules`), timed by `evaluate`, run by
`parlab.planner.placement_run`, drawn by `parlab.planner.explore_placement`: one source.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from parlab.core.link import Link
from parlab.planner.graph import Graph

# A send/recv of n bytes between two ranks of this machine, as docs/measurements.md measured it:
# ~0.1 ms per message (one ring round of a hand-written algorithm) and 2.3–2.5 GB/s one way.
LOOPBACK_P2P = Link(1e-4, 2.4e9, "loopback send/recv (docs/measurements.md)")


def message_seconds(nbytes: float, link: Link | None = None) -> float:
    """One message of `nbytes` between ranks: loopback's own α + n/β, plus the emulated link's."""
    return LOOPBACK_P2P.cost(nbytes) + (link.cost(nbytes) if link is not None else 0.0)


class Task(NamedTuple):
    kind: str  # "F" forward or "B" backward
    op: str
    mb: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.op}.{self.mb}"


def tasks(graph: Graph) -> list[Task]:
    """Every task of one step, in a topological order."""
    m, names = graph.microbatches, graph.names
    return ([Task("F", n, k) for k in range(m) for n in names]
            + [Task("B", n, k) for k in range(m) for n in reversed(names)])


def durations(graph: Graph) -> dict[Task, float]:
    fwd, bwd = graph.times()
    return {t: (fwd if t.kind == "F" else bwd)[t.op] for t in tasks(graph)}


def precedences(graph: Graph) -> list[tuple[Task, Task, int | None]]:
    """(before, after, bytes): `bytes` of the message when the two ops sit on different ranks,
    None where both tasks are of one op (same rank by construction)."""
    out = []
    for k in range(graph.microbatches):
        for u, v, nbytes in graph.edges():
            out.append((Task("F", u, k), Task("F", v, k), nbytes))  # activation (B/m, T, ·)
            out.append((Task("B", v, k), Task("B", u, k), nbytes))  # its gradient, same shape
        for n in graph.names:
            out.append((Task("F", n, k), Task("B", n, k), None))
            if k + 1 < graph.microbatches:
                out.append((Task("F", n, k), Task("F", n, k + 1), None))
                out.append((Task("B", n, k), Task("B", n, k + 1), None))
    return out


@dataclass(frozen=True)
class Plan:
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


def evaluate(graph: Graph, plan: Plan, link: Link | None = None,
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
        preds[b].append((a, message_seconds(nbytes, link) if cross else 0.0))
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
                     **info) -> Plan:
    """A plan whose per-rank order is the tasks sorted by start time (ties: topological order)."""
    index = {t: i for i, t in enumerate(tasks(graph))}
    order = [sorted((t for t in start if place[t.op] == r), key=lambda t: (start[t], index[t]))
             for r in range(ranks)]
    return Plan(name, ranks, tuple((n, place[n]) for n in graph.names),
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


def exhaustive(graph: Graph, ranks: int, link: Link | None = None) -> Plan:
    """The optimal plan by enumeration: placements × the orders of a topological order of tasks."""
    all_tasks, dur = tasks(graph), durations(graph)
    if len(all_tasks) > MAX_EXHAUSTIVE_TASKS:
        raise ValueError(f"exhaustive search is for ≤ {MAX_EXHAUSTIVE_TASKS} tasks; this graph has "
                         f"{len(all_tasks)} (microbatches={graph.microbatches}): use method='milp'")
    t0 = time.perf_counter()
    prec = precedences(graph)
    preds = {t: [a for a, b, _ in prec if b == t] for t in all_tasks}
    orders = list(_topological_orders(all_tasks, preds))
    idx = {t: i for i, t in enumerate(all_tasks)}
    d = [dur[t] for t in all_tasks]
    ops = list(graph.names)
    best, best_start, best_place, evaluated = float("inf"), None, None, 0
    for assign in _placements(len(ops), ranks):
        place = dict(zip(ops, assign))
        rank = [place[t.op] for t in all_tasks]
        inc = [[(idx[a], message_seconds(n, link) if n is not None and place[a.op] != place[b.op]
                 else 0.0) for a, b, n in prec if b == t] for t in all_tasks]
        for order in orders:
            free, end = [0.0] * ranks, [0.0] * len(all_tasks)
            for t in order:
                i = idx[t]
                s = max([free[rank[i]]] + [end[j] + c for j, c in inc[i]])
                end[i] = free[rank[i]] = s + d[i]
            evaluated += 1
            span = max(end)
            if span < best - 1e-12:
                best, best_place = span, place
                best_start = {t: end[idx[t]] - d[idx[t]] for t in all_tasks}
    return plan_from_starts(graph, "exhaustive", ranks, best_place, best_start, objective=best,
                            status=f"optimal ({evaluated:,} schedules)",
                            solve_s=time.perf_counter() - t0)


def list_schedule(graph: Graph, place: dict, link: Link | None = None) -> dict[Task, float]:
    """Start times of a greedy list schedule for one placement: repeatedly start the task that can
    start earliest (ties: the longest path still ahead of it first). Not optimal; fast."""
    dur, prec = durations(graph), precedences(graph)
    preds = {t: [] for t in dur}
    succs = {t: [] for t in dur}
    for a, b, n in prec:
        c = message_seconds(n, link) if n is not None and place[a.op] != place[b.op] else 0.0
        preds[b].append((a, c))
        succs[a].append((b, c))
    ahead: dict[Task, float] = {}
    for t in reversed(tasks(graph)):  # the longest path from t's start to the end of the step
        ahead[t] = dur[t] + max((c + ahead[b] for b, c in succs[t]), default=0.0)
    free, start, end = {}, {}, {}

    def earliest(t):
        return max([free.get(place[t.op], 0.0)] + [end[p] + c for p, c in preds[t]])

    while len(start) < len(dur):
        ready = [t for t in dur if t not in start and all(p in end for p, _ in preds[t])]
        t = min(ready, key=lambda t: (earliest(t), -ahead[t]))
        start[t] = earliest(t)
        end[t] = free[place[t.op]] = start[t] + dur[t]
    return start


def greedy(graph: Graph, ranks: int, link: Link | None = None) -> Plan:
    """The best greedy list schedule over every placement (up to renaming ranks): an upper bound
    on the optimum, and the MILP's big-M."""
    best, dur = None, durations(graph)
    for assign in _placements(len(graph.names), ranks):
        place = dict(zip(graph.names, assign))
        start = list_schedule(graph, place, link)
        span = max(start[t] + d for t, d in dur.items())
        if best is None or span < best[0]:
            best = (span, place, start)
    return plan_from_starts(graph, "greedy", ranks, best[1], best[2], objective=best[0],
                            status="list schedule (an upper bound)")


# ----------------------------------------------------------------------------- the MILP
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


def build_milp(graph: Graph, ranks: int, link: Link | None = None, upper: Plan | None = None):
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
              time_limit: float = 30.0) -> Plan:
    """Solve the MILP with scipy.optimize.milp (HiGHS); the plan orders each rank by start time."""
    t0 = time.perf_counter()
    upper = greedy(graph, ranks, link)
    model, x, s, cmax = build_milp(graph, ranks, link, upper)
    res = model.solve(cmax, time_limit)
    info = dict(solve_s=time.perf_counter() - t0, model=model.text())
    if res.x is None or res.status != 0 and res.x[cmax] / 1e3 >= upper.objective:
        # stopped at the time limit before it beat the greedy plan: keep that one, say so
        return Plan("milp", ranks, upper.place, upper.order, upper.objective,
                    f"stopped at {time_limit:g} s ({res.message}): the greedy plan", **info)
    place = {n: int(np.argmax([res.x[i] for i in x[n]])) for n in graph.names}
    start = {t: res.x[i] / 1e3 for t, i in s.items()}
    gap = getattr(res, "mip_gap", None)
    status = ("optimal" if res.status == 0 else f"stopped at {time_limit:g} s") + (
        f", gap {gap:.1e}" if gap is not None else "")
    return plan_from_starts(graph, "milp", ranks, place, start, objective=res.x[cmax] / 1e3,
                            status=status, **info)


def solve(graph: Graph, ranks: int, link: Link | str | None = None, method: str = "milp",
          time_limit: float = 30.0) -> Plan:
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
