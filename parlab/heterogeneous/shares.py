"""How many rows of the global batch each rank takes: even, proportional to speed, or HAP's LP.

Rank r at speed s_r taking b_r of B rows computes for (f + b_r)·t/s_r (f: the per-step work that
does not grow with the batch, in rows' worth). `even`: b_r = B/N. `proportional`: b_r ∝ s_r
(largest remainders; still the slow rank pays f/s_r). `lp`: Zhang et al., "HAP: SPMD DNN
Training on Heterogeneous GPU Clusters with Automated Program Synthesis" (EuroSys 2024) choose
sharding ratios by linear programming; here, c the all-reduce's seconds in rows' worth:

    minimise T  subject to  (f + b_r)/s_r + c ≤ T  for every rank r,   Σ_r b_r = B,   b_r ≥ 0

solved with `scipy.optimize.linprog` (HiGHS), then whole rows handed out greedily to the rank that
would finish first. A rank given no rows runs no forward or backward, so it does not pay f: the LP is
solved on the k fastest ranks for every k (the others idle, at `idle_rows`/s_r: their optimizer
step, 0 by default) and the shortest T* kept — the slowest device gets rows only when
s > f / T*_others (with it, its b = s·T − f must be positive at a T below the others' own).
In data parallelism the link moves T*, not the shares. In full:
docs/heterogeneous.md, `parlab.heterogeneous.shares`.
"""

from __future__ import annotations

import math

from parlab.core.cost import chunk_bounds

SHARDINGS = ("even", "proportional", "lp")


def even(batch: int, world_size: int) -> list[int]:
    """B/N rows each, the first B mod N ranks one more."""
    base, extra = divmod(batch, world_size)
    return [base + (1 if r < extra else 0) for r in range(world_size)]


def proportional(batch: int, speeds) -> list[int]:
    """b_r ∝ s_r: floors of B·s_r/Σs, the leftover rows to the largest remainders (ties: lower rank)."""
    exact = [batch * s / sum(speeds) for s in speeds]
    rows = [math.floor(x) for x in exact]
    order = sorted(range(len(speeds)), key=lambda r: (-(exact[r] - rows[r]), r))
    for r in order[:batch - sum(rows)]:
        rows[r] += 1
    return rows


def rank_time(rows: float, speed: float, fixed_rows: float, comm_rows: float = 0.0) -> float:
    """A rank's step, in seconds of one row's compute at speed 1: (f + b)/s + c."""
    return (fixed_rows + rows) / speed + comm_rows


def busy_time(rows: float, speed: float, fixed_rows: float, idle_rows: float = 0.0) -> float:
    """A rank's step in row-times when a rank with no rows computes only `idle_rows` (no forward,
    no backward, so none of f): (f + b)/s, or idle/s at b = 0."""
    return idle_rows / speed if rows == 0 else rank_time(rows, speed, fixed_rows)


def _lp_problem(batch: int, speeds, fixed_rows: float, comm_rows: float):
    """The LP of the module docstring in `linprog`'s form: (cost, A_ub, b_ub, A_eq, b_eq)."""
    n = len(speeds)
    cost = [0.0] * n + [1.0]  # minimise T, the last variable
    a_ub = [[(1.0 / speeds[r]) if j == r else 0.0 for j in range(n)] + [-1.0] for r in range(n)]
    b_ub = [-fixed_rows / speeds[r] - comm_rows for r in range(n)]  # b_r/s_r − T ≤ −f/s_r − c
    return cost, a_ub, b_ub, [[1.0] * n + [0.0]], [float(batch)]  # Σ b_r = B


def _solve_first(batch: int, speeds, fixed_rows: float, comm_rows: float):
    from scipy.optimize import linprog

    n = len(speeds)
    cost, a_ub, b_ub, a_eq, b_eq = _lp_problem(batch, speeds, fixed_rows, comm_rows)
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq,
                     bounds=[(0, None)] * n + [(None, None)], method="highs")
    if not result.success:
        raise ValueError(f"the sharding LP failed for speeds={list(speeds)}: {result.message}")
    return list(result.x[:n]), float(result.x[n])


def degenerate(batch: int, speeds, fixed_rows: float, comm_rows: float = 0.0) -> bool:
    """Whether the LP's optimum is degenerate: rows can move between ranks without changing T*
    (rank 0's least and greatest optimal rows differ)."""
    from scipy.optimize import linprog

    n = len(speeds)
    _, t_star = _solve_first(batch, speeds, fixed_rows, comm_rows)
    a_ub = [[(1.0 / speeds[r]) if j == r else 0.0 for j in range(n)] for r in range(n)]
    b_ub = [t_star + 1e-9 - fixed_rows / speeds[r] - comm_rows for r in range(n)]
    ends = [linprog([sign] + [0.0] * (n - 1), A_ub=a_ub, b_ub=b_ub, A_eq=[[1.0] * n], b_eq=[batch],
                    bounds=[(0, None)] * n, method="highs").x[0] for sign in (1.0, -1.0)]
    return ends[1] - ends[0] > 1e-6


def _solve_all(batch: int, speeds, fixed_rows: float, comm_rows: float = 0.0):
    """HAP's linear program with every rank taking rows: (continuous rows per rank, T*).

    The optimum can be degenerate (a slow rank's f/s_r sets T*, and any b that keeps the others
    under it is optimal; HiGHS returns some vertex, e.g. [4.5, 3, 4.5, 0] for three equal ranks):
    then, among the optimal b, the one whose largest rows per unit of speed is smallest, so equal
    devices get equal rows (variables b, T ≤ T*, z ≥ b_r/s_r; minimise z)."""
    from scipy.optimize import linprog

    rows, t_star = _solve_first(batch, speeds, fixed_rows, comm_rows)
    if not degenerate(batch, speeds, fixed_rows, comm_rows):
        return rows, t_star
    n = len(speeds)
    _, a_ub, b_ub, a_eq, b_eq = _lp_problem(batch, speeds, fixed_rows, comm_rows)
    tied = linprog([0.0] * (n + 1) + [1.0],
                   A_ub=[row + [0.0] for row in a_ub]
                   + [[1.0 / speeds[r] if j == r else 0.0 for j in range(n)] + [0.0, -1.0]
                      for r in range(n)],
                   b_ub=b_ub + [0.0] * n, A_eq=[a_eq[0] + [0.0]], b_eq=b_eq,
                   bounds=[(0, None)] * n + [(None, t_star + 1e-9 * max(1.0, abs(t_star))),
                                              (None, None)], method="highs")
    return ([float(v) for v in tied.x[:n]] if tied.success else rows), t_star


def solve_lp(batch: int, speeds, fixed_rows: float, comm_rows: float = 0.0, idle_rows: float = 0.0):
    """HAP's linear program (module docstring): (continuous rows per rank, T*), T* the shortest
    over the k fastest ranks taking rows (k = N first; fewer only when strictly shorter), a rank
    without rows at idle_rows/s_r + c."""
    n = len(speeds)
    order = sorted(range(n), key=lambda r: (-speeds[r], r))
    best = None
    for k in range(n, 0, -1):
        active = sorted(order[:k])
        part, t_part = _solve_all(batch, [speeds[r] for r in active], fixed_rows, comm_rows)
        idle = [idle_rows / speeds[r] + comm_rows for r in order[k:]]
        t_star = max([t_part] + idle)
        if best is None or t_star < best[1] - 1e-9 * max(1.0, abs(best[1])):
            rows = [0.0] * n
            for r, b in zip(active, part):
                rows[r] = float(b)
            best = (rows, t_star)
    return best


def lp(batch: int, speeds, fixed_rows: float, comm_rows: float = 0.0) -> list[int]:
    """Whole rows from the LP: floors of its solution, then each leftover row to the rank that
    would finish first with it (ties: lower rank)."""
    continuous, _ = solve_lp(batch, speeds, fixed_rows, comm_rows)
    rows = [min(batch, math.floor(x + 1e-9)) for x in continuous]
    while sum(rows) > batch:  # round-off: take back from the latest finisher
        r = max((i for i in range(len(rows)) if rows[i] > 0),
                key=lambda i: (rank_time(rows[i], speeds[i], fixed_rows), -i))
        rows[r] -= 1
    while sum(rows) < batch:
        r = min(range(len(rows)), key=lambda i: (rank_time(rows[i] + 1, speeds[i], fixed_rows), i))
        rows[r] += 1
    return rows


def shares(sharding: str, batch: int, speeds, fixed_rows: float = 0.0,
           comm_rows: float = 0.0) -> list[int]:
    """Rows per rank under `sharding` ("even" | "proportional" | "lp"); they sum to `batch`."""
    if sharding == "even":
        return even(batch, len(speeds))
    if sharding == "proportional":
        return proportional(batch, speeds)
    if sharding == "lp":
        return lp(batch, speeds, fixed_rows, comm_rows)
    raise ValueError(f"shard={sharding!r} must be one of {SHARDINGS}")


def bounds(rows: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each rank's rows in the global batch, in rank order."""
    return chunk_bounds(rows)
