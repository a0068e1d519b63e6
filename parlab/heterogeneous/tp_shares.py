"""Uneven tensor-parallel shards: one sharding ratio per device, by HAP's LP, cut into heads,
MLP columns and sequence positions.

Zhang et al., "HAP: SPMD DNN Training on Heterogeneous GPU Clusters with Automated Program
Synthesis" (EuroSys 2024) give device r a sharding ratio w_r (Σ w_r = 1) chosen by a linear
program from the device speeds and the link. Here every sharded dimension of Megatron's
tensor + sequence parallel block follows the same w (`cut`: largest remainders, ≥ 1 unit), and

    minimise T  subject to  (f + w_r)/s_r + comm ≤ T for every r,   Σ_r w_r = 1,   w_r ≥ 0

with comm = κ·(N−1)·M (padded, M ≥ w_k) or κ·(1 − m) (exact ring, m ≤ w_k), solved with
`scipy.optimize.linprog` (HiGHS); κ = 0 is `shares.solve_lp`. The terms f and κ and what each
collective does to the shares: docs/heterogeneous.md, `parlab.heterogeneous.tp_shares`.
"""

from __future__ import annotations

import math

from parlab.heterogeneous import shares as shares_mod

VARIANTS = ("padded", "exact")
DIMENSIONS = ("heads", "columns", "tokens")


def solve(speeds, fixed: float, kappa: float = 0.0, variant: str = "exact"):
    """HAP's LP above: (ratios w, T* in units of W). A rank so slow that f/s_r ≥ T* sets the step
    with no work at all; it gets w_r = 0 and the others are balanced by the LP among themselves
    (else the LP, indifferent, may hand all the work to any one rank under T*)."""
    n = len(speeds)
    w, t_star = _lp(speeds, list(range(n)), fixed, kappa, variant)
    comm = 0.0 if n == 1 else kappa * ((n - 1) * max(w) if variant == "padded" else 1 - min(w))
    idle = [r for r in range(n) if fixed / speeds[r] + comm >= t_star - 1e-9]
    if idle and len(idle) < n:
        busy = [r for r in range(n) if r not in idle]
        part, _ = _lp(speeds, busy, fixed, kappa, variant, nobody_idle=False)
        w = [0.0] * n
        for r, x in zip(busy, part):
            w[r] = x
    return w, t_star


def _lp(speeds, ranks, fixed, kappa, variant, nobody_idle=True):
    """The LP over `ranks` (the others hold w = 0): (their ratios, T*)."""
    from scipy.optimize import linprog

    n, k = len(speeds), len(ranks)
    if kappa == 0.0 or n == 1:  # no link (or one rank): nothing moves, chapter 11's batch LP
        ratios, t_star = shares_mod.solve_lp(1, [speeds[r] for r in ranks], fixed)
        return [float(w) for w in ratios], float(t_star)
    # variables: w of each rank in `ranks`, y (M for padded, m for exact), T
    cost = [0.0] * (k + 1) + [1.0]
    a_ub, b_ub = [], []
    for i, r in enumerate(ranks):
        row = [1.0 / speeds[r] if j == i else 0.0 for j in range(k)]
        if variant == "padded":  # (f + w_r)/s_r + κ(N−1)M − T ≤ 0
            a_ub.append(row + [kappa * (n - 1), -1.0])
            b_ub.append(-fixed / speeds[r])
        else:  # (f + w_r)/s_r + κ(1 − m) − T ≤ 0
            a_ub.append(row + [-kappa, -1.0])
            b_ub.append(-fixed / speeds[r] - kappa)
    sign = 1.0 if variant == "padded" else -1.0
    for i in range(k):  # padded: w_r − M ≤ 0; exact: m − w_r ≤ 0
        a_ub.append([sign if j == i else 0.0 for j in range(k)] + [-sign, 0.0])
        b_ub.append(0.0)
    y_bounds = (0, None) if nobody_idle or variant == "padded" else (0, 0)  # an idle rank: m = 0
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=[[1.0] * k + [0.0, 0.0]], b_eq=[1.0],
                     bounds=[(0, None)] * k + [y_bounds, (None, None)], method="highs")
    if not result.success:
        raise ValueError(f"the sharding LP failed for speeds={list(speeds)}: {result.message}")
    return [float(w) for w in result.x[:k]], float(result.x[-1])


def ratios(sharding: str, speeds, fixed: float = 0.0, kappa: float = 0.0,
           variant: str = "exact") -> list[float]:
    """w under `sharding`: "even" (1/N each), "proportional" (∝ speed) or "lp" (HAP's LP)."""
    n = len(speeds)
    if sharding == "even":
        return [1.0 / n] * n
    if sharding == "proportional":
        return [s / sum(speeds) for s in speeds]
    if sharding == "lp":
        return solve(speeds, fixed, kappa, variant)[0]
    raise ValueError(f"shard={sharding!r} must be one of {shares_mod.SHARDINGS}")


def cut(size: int, weights) -> list[int]:
    """`size` units cut by `weights` into whole units: floors of size·w_r, at least one for every
    rank with w_r > 0 when there are enough units (each rank holds a piece of every sharded weight),
    then the leftover units to the largest remainders, or back from the most over-served (ties:
    lower rank). Equal weights: `shares.even`; no minimum to respect: `shares.proportional`."""
    weights = [round(float(w), 12) for w in weights]  # an LP's equal shares are equal
    n = len(weights)
    if len(set(weights)) == 1:
        return shares_mod.even(size, n)
    ideal = [size * w / sum(weights) for w in weights]
    floor = 1 if size >= sum(1 for w in weights if w > 0) else 0
    units = [max(floor if w > 0 else 0, math.floor(x)) for w, x in zip(weights, ideal)]
    while sum(units) > size:
        r = max((k for k in range(n) if units[k] > (floor if weights[k] > 0 else 0)),
                key=lambda k: (units[k] - ideal[k], -k))
        units[r] -= 1
    while sum(units) < size:
        r = max(range(n), key=lambda k: (ideal[k] - units[k], -k))
        units[r] += 1
    return units


def split(cfg_model, weights) -> dict[str, list[int]]:
    """Heads, MLP columns and sequence positions of each rank for ratios `weights`."""
    return {"heads": cut(cfg_model.n_head, weights),
            "columns": cut(4 * cfg_model.n_embd, weights),
            "tokens": cut(cfg_model.block_size, weights)}


def problems(parts: dict[str, list[int]], speeds, sharding: str, weights=None) -> list[str]:
    """A rank the ratios give no work (the LP finds it too slow to be worth a shard: f/s_r ≥ T*), and
    every dimension that leaves some rank with nothing (more ranks than heads), as phrases."""
    out = []
    idle = [r for r, w in enumerate(weights or []) if w <= 1e-12]
    if idle:
        out.append(f"shard={sharding!r} gives rank(s) {idle} no work at speeds={list(speeds)} (ratios "
                   f"{[round(w, 3) for w in weights]}): too slow to be worth a shard")
    for name, sizes in parts.items():
        empty = [r for r, s in enumerate(sizes) if s == 0]
        if empty:
            out.append(f"{name} split {sizes} leaves rank(s) {empty} with zero {name} "
                       f"(shard={sharding!r}, speeds={list(speeds)})")
    return out


def bounds(sizes: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each rank's units, in rank order."""
    return shares_mod.bounds(sizes)
