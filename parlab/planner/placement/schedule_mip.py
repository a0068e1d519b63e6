"""The planner of the paper's comparison: a time-indexed MIP that orders a pipeline schedule's
F, B and W tasks under a memory cap, to set beside DualPipe and 1F1B at equal memory.

She et al. (2025, arXiv 2503.09357, abstract) report "reducing computational bubbles by half under
the same memory constraints" against DeepSeek-V3's DualPipe. The question is asked of chapter 04's
own schedules, in the DeepSeek-V3 report's Table 2 units (`Units`: F, B, W, a message `latency`):
x[a, τ] = 1 when task a starts at tick τ; precedences, one task per rank and tick, the chunks held
F→W ≤ the compared schedule's peak, objective the makespan. The answer is a `Schedule`, checked by
`parlab.pipeline.validate.check` and timed by the same simulator as DualPipe and 1F1B.
Simplifications (the placement is the compared schedule's, integer ticks, one chunk at a time)
and the model in full: docs/planner.md, `parlab.planner.placement.schedule_mip`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from parlab.pipeline import cost as pp_cost
from parlab.pipeline.actions import Action, Schedule
from parlab.pipeline.validate import check, simulate


@dataclass(frozen=True)
class Units:
    """Durations in integer ticks: forward F, input gradient B, weight gradient W; a message."""

    forward: int = 1   # one micro-batch's forward through one chunk
    backward: int = 1  # its input gradient (B of zero bubble's split backward)
    weight: int = 1    # its weight gradient (W)
    latency: int = 0   # a message between neighbouring ranks

    def __post_init__(self):
        for name in ("forward", "backward", "weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be an int >= 1 (ticks)")
        if isinstance(self.latency, bool) or not isinstance(self.latency, int) or self.latency < 0:
            raise ValueError(f"latency={self.latency!r} must be an int >= 0 (ticks)")

    def of(self, op: str) -> int:
        return {"F": self.forward, "B": self.backward, "W": self.weight}[op]


def split(schedule: Schedule) -> Schedule:
    """The schedule with every full backward written as B then its W (same order, same memory:
    the W frees the chunk right after the B would have)."""
    if schedule.split_backward:
        return schedule
    ranks = [[x for a in seq for x in ((a, Action("W", a.stage, a.mb, a.dir)) if a.op == "B"
                                         else (a,))] for seq in schedule.actions]
    return Schedule(schedule.name, schedule.pp, schedule.microbatches, schedule.chunks, True,
                    tuple(tuple(seq) for seq in ranks), schedule.bidirectional, ())


def duration(units: Units, schedule: Schedule):
    """duration(action) for `validate.simulate`: an unsplit B is B + W."""
    def d(a: Action) -> int:
        if a.op == "B" and not schedule.split_backward:
            return units.backward + units.weight
        return units.of(a.op)
    return d


def makespan(schedule: Schedule, units: Units) -> tuple[float, list[dict]]:
    """The list-scheduled makespan (ticks) and events of `schedule`: messages on a wire."""
    events = simulate(schedule, duration(units, schedule), units.latency)
    return max(e["t1"] for e in events), events


def peak_chunks(schedule: Schedule) -> list[int]:
    """Per rank, the most micro-batch chunks whose activations it holds (`cost.held_peak`)."""
    ones = {s: 1 for s in range(schedule.stages)}
    return [pp_cost.held_peak(schedule, r, ones) for r in range(schedule.pp)]


def weight_chunks(schedule: Schedule) -> list[int]:
    """Per rank, the model chunks (stage copies) whose weights it holds."""
    return [len({(a.stage, a.dir) for a in seq}) for seq in schedule.actions]


def precedences(schedule: Schedule, units: Units) -> list[tuple[Action, Action, int]]:
    """(before, after, lag in ticks) of the split task set of `schedule` on its placement."""
    s = split(schedule)
    last, out = s.stages - 1, []
    rank = {a: r for r, seq in enumerate(s.actions) for a in seq}

    def lag(a: Action, b: Action) -> int:
        return units.of(a.op) + (units.latency if rank[a] != rank[b] else 0)

    mbs: dict[tuple, list] = {}
    for a in rank:
        mbs.setdefault((a.op, a.stage, a.dir), []).append(a.mb)
        if a.op == "F" and a.stage > 0:
            p = Action("F", a.stage - 1, a.mb, a.dir)
            out.append((p, a, lag(p, a)))
        if a.op == "B":
            f = Action("F", a.stage, a.mb, a.dir)
            out.append((f, a, lag(f, a)))
            if a.stage < last:
                n = Action("B", a.stage + 1, a.mb, a.dir)
                out.append((n, a, lag(n, a)))
        if a.op == "W":
            b = Action("B", a.stage, a.mb, a.dir)
            out.append((b, a, lag(b, a)))
    for (op, stage, d), ks in mbs.items():  # micro-batches pass each chunk in order
        ks.sort()
        for k0, k1 in zip(ks, ks[1:]):
            a, b = Action(op, stage, k0, d), Action(op, stage, k1, d)
            out.append((a, b, units.of(op)))
    return out


@dataclass(frozen=True)
class PlannedPipeline:
    """The planner's schedule and how it was found."""

    schedule: Schedule
    objective: float  # the MIP's makespan (ticks)
    horizon: int  # the compared schedule's makespan: the planner's upper bound
    cap: int  # activation chunks per rank allowed
    status: str
    solve_s: float
    variables: int
    binaries: int
    constraints: int


def _windows(tasks: list, dur: dict, prec: list, horizon: int) -> tuple[dict, dict]:
    """Earliest start (longest path from the sources) and latest start (horizon − longest path
    from the task's start to the end) of every task."""
    preds: dict = {t: [] for t in tasks}
    succs: dict = {t: [] for t in tasks}
    for a, b, lag in prec:
        preds[b].append((a, lag))
        succs[a].append((b, lag))
    order, seen = [], set()

    def visit(t):  # depth-first topological order (the DAG is small)
        stack = [(t, iter(succs[t]))]
        seen.add(t)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                order.append(node)
            elif nxt[0] not in seen:
                seen.add(nxt[0])
                stack.append((nxt[0], iter(succs[nxt[0]])))
    for t in tasks:
        if t not in seen:
            visit(t)
    order.reverse()
    early = {}
    for t in order:
        early[t] = max((early[a] + lag for a, lag in preds[t]), default=0)
    tail = {}
    for t in reversed(order):
        tail[t] = max([dur[t]] + [lag + tail[b] for b, lag in succs[t]])
    return early, {t: horizon - tail[t] for t in tasks}


def plan(schedule: Schedule, units: Units = Units(), cap: int | None = None,
         horizon: int | None = None, time_limit: float = 20.0) -> PlannedPipeline:
    """The MIP's schedule of `schedule`'s tasks on its placement, holding at most `cap` chunks per
    rank (default: `schedule`'s own peak), ending by `horizon` ticks (default: `schedule`'s own
    makespan, so it is a feasible point). ValueError when no schedule fits."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    t0 = time.perf_counter()
    s = split(schedule)
    cap = max(peak_chunks(s)) if cap is None else cap
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"cap={cap!r} must be an int >= 1 (activation chunks per rank)")
    horizon = int(makespan(s, units)[0]) if horizon is None else horizon
    rank = {a: r for r, seq in enumerate(s.actions) for a in seq}
    tasks = list(rank)
    dur = {a: units.of(a.op) for a in tasks}
    prec = precedences(s, units)
    early, late = _windows(tasks, dur, prec, horizon)
    if any(late[t] < early[t] for t in tasks):
        raise ValueError(f"no schedule of these tasks ends by horizon={horizon} ticks")
    col: dict = {}
    for t in tasks:
        for tau in range(early[t], late[t] + 1):
            col[t, tau] = len(col)
    c_var = len(col)
    n = c_var + 1
    rows, cols, vals, lo, hi = [], [], [], [], []

    def add(entries, low, high):
        r = len(lo)
        for j, v in entries:
            rows.append(r)
            cols.append(j)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    def started_by(t, tau):  # Σ_{τ' ≤ τ} x[t, τ']: 1 once t has started by tick τ
        return [(col[t, k], 1.0) for k in range(early[t], min(tau, late[t]) + 1)]

    for t in tasks:
        add([(col[t, k], 1.0) for k in range(early[t], late[t] + 1)], 1, 1)
    for a, b, lag in prec:  # b started by τ  ⇒  a started by τ − lag
        for tau in range(early[b], late[b] + 1):
            if tau - lag >= late[a]:
                continue  # a has surely started by then
            add(started_by(b, tau) + [(j, -v) for j, v in started_by(a, tau - lag)], -np.inf, 0)
    per_rank: dict = {}
    for t in tasks:
        per_rank.setdefault(rank[t], []).append(t)
    for mine in per_rank.values():
        for tau in range(horizon):
            busy = [(col[t, k], 1.0) for t in mine
                    for k in range(max(early[t], tau - dur[t] + 1), min(late[t], tau) + 1)]
            if len(busy) > 1:
                add(busy, -np.inf, 1)
            held = [e for t in mine if t.op == "F" for e in started_by(t, tau)]
            held += [(j, -v) for t in mine if t.op == "W"
                     for j, v in started_by(t, tau - dur[t])]
            if sum(v for _, v in held if v > 0) > cap:
                add(held, -np.inf, cap)
    sinks = {t for t in tasks} - {a for a, _, _ in prec}
    for t in sinks:  # C ≥ end of every last task
        add([(col[t, k], float(k + dur[t])) for k in range(early[t], late[t] + 1)]
            + [(c_var, -1.0)], -np.inf, 0)
    a = coo_matrix((vals, (rows, cols)), shape=(len(lo), n)).tocsr()
    cost = np.zeros(n)
    cost[c_var] = 1.0
    busy_max = max(sum(dur[t] for t in mine) for mine in per_rank.values())
    lb, ub = np.zeros(n), np.ones(n)
    lb[c_var], ub[c_var] = busy_max, horizon
    integrality = np.ones(n)
    integrality[c_var] = 0
    res = milp(cost, integrality=integrality, bounds=Bounds(lb, ub),
               constraints=LinearConstraint(a, lo, hi),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-9})
    if res.x is None:
        raise ValueError(f"no schedule holds at most cap={cap} chunks per rank and ends by "
                         f"{horizon} ticks ({res.message})")
    start = {t: next(k for k in range(early[t], late[t] + 1) if res.x[col[t, k]] > 0.5)
             for t in tasks}
    ranks = [tuple(sorted(per_rank.get(r, []), key=lambda t: (start[t], "FBW".index(t.op))))
             for r in range(s.pp)]
    planned = check(Schedule("planned", s.pp, s.microbatches, s.chunks, True, tuple(ranks),
                             s.bidirectional, ()))
    status = "optimal" if res.status == 0 else f"stopped at {time_limit:g} s ({res.message})"
    return PlannedPipeline(planned, float(round(res.x[c_var], 6)), horizon, cap, status,
                           time.perf_counter() - t0, n, n - 1, len(lo))
