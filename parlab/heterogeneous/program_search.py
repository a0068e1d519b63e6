"""HAP's search, small: the cheapest program of `parlab.heterogeneous.programs` for these devices
and this link by A*, alternating with the sharding-ratio LP until the program stops changing.

Zhang et al., "HAP: SPMD DNN Training on Heterogeneous GPU Clusters with Automated Program
Synthesis" (EuroSys 2024, §4–§6): a program's cost is, per instruction, its slowest device's
computation plus its slowest device's communication, summed (`program_cost`):

    Σ_op [max_r fwd_op,r + max_r bwd_op,r + max_r opt_op,r]·L  +  Σ_edge [comm fwd + comm bwd]·L
    + the all-reduce of the partial gradients

`a_star` finds the cheapest program with an admissible heuristic (the first complete program
popped is optimal; `exhaustive` checks all 4608); `solve_ratios` is HAP's LP for one program.

The cost terms, the heuristic's argument, the LP and what ours simplifies (one program for every
block, one ratio vector, exact-size rings, per-operator max): docs/heterogeneous.md,
`parlab.heterogeneous.program_search`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from parlab.core import cost as core_cost
from parlab.heterogeneous import cost
from parlab.heterogeneous import programs as pg
from parlab.heterogeneous.hap_time import PHASES, Profile, op_cost, profile, steps_seconds, sync_seconds

W_MIN = 0.01  # every rank keeps a share of the sharded dimensions (SPMD: it runs the program)
MAX_ROUNDS = 8  # alternations at most (the program stops changing after two or three)


# ----------------------------------------------------------------------------- a program's cost
class CostTable:
    """Every operator choice's and every edge's cost at one split: what A* and the enumeration add."""

    def __init__(self, cfg, split: dict):
        self.cfg, self.split = cfg, split
        self.prof = profile(cfg)
        speeds = cost.speeds_of(cfg)
        layers = cfg.model_config.n_layer
        self.ops = {(op, c): op_cost(op, c, split, speeds, self.prof, layers)
                    for op in pg.OPS for c in pg.CHOICES[op]}
        self.cheapest = {op: min(self.ops[(op, c)] for c in pg.CHOICES[op]) for op in pg.OPS}
        self._edges: dict = {}
        self._sync: dict = {}

    def edge(self, name: str, producer: str, consumer: str, made: str, used: str) -> float:
        key = (name, made, used)
        if key not in self._edges:
            e = pg.edge(name, producer, consumer, made, used)
            self._edges[key] = self.cfg.model_config.n_layer * sum(
                steps_seconds(s, e.width, self.cfg, self.split) for s in (e.forward, e.backward))
        return self._edges[key]

    def sync(self, program: pg.Program) -> float:
        key = pg.partial_gradients(program)
        key = (key[0], tuple(key[1]))
        if key not in self._sync:
            self._sync[key] = sync_seconds(program, self.cfg)
        return self._sync[key]

    def total(self, program: pg.Program) -> float:
        return (sum(self.ops[(op, c)] for op, c in zip(pg.OPS, program.choices))
                + sum(self.edge(name, p, c, program[p], program[c]) for name, p, c in pg.EDGES)
                + self.sync(program))


def program_cost(cfg, program: pg.Program, split: dict) -> float:
    """HAP's cost of `program` at `split` (module docstring), seconds per step."""
    return CostTable(cfg, split).total(program)


# ----------------------------------------------------------------------------- A* and enumeration
@dataclass
class SearchResult:
    program: pg.Program
    cost: float
    expanded: int  # nodes taken off the queue (A*) or programs evaluated (enumeration)


def a_star(table: CostTable) -> SearchResult:
    """The cheapest program under `table` by A* over prefixes of choices in `programs.OPS` order,
    h = Σ of the remaining operators' cheapest compute (admissible: module docstring)."""
    rest = [sum(table.cheapest[op] for op in pg.OPS[k:]) for k in range(len(pg.OPS) + 1)]
    decided = {k: [(name, p, c) for name, p, c in pg.EDGES
                   if max(pg.OPS.index(p), pg.OPS.index(c)) == k] for k in range(len(pg.OPS))}
    queue = [(rest[0], 0, 0.0, ())]
    counter, expanded = 1, 0
    while queue:
        f, _, g, prefix = heapq.heappop(queue)
        k = len(prefix)
        if k == len(pg.OPS):
            return SearchResult(pg.Program(prefix), g, expanded)
        expanded += 1
        op = pg.OPS[k]
        for choice in pg.CHOICES[op]:
            chosen = prefix + (choice,)
            g2 = g + table.ops[(op, choice)] + sum(
                table.edge(name, p, c, chosen[pg.OPS.index(p)], chosen[pg.OPS.index(c)])
                for name, p, c in decided[k])
            if k + 1 == len(pg.OPS):
                g2 += table.sync(pg.Program(chosen))
            heapq.heappush(queue, (g2 + rest[k + 1], counter, g2, chosen))
            counter += 1
    raise ValueError("the program space is empty")


def exhaustive(table: CostTable) -> SearchResult:
    """Every program evaluated; the cheapest (ties: the first in `programs.every_program` order)."""
    best, count = None, 0
    for program in pg.every_program():
        c = table.total(program)
        count += 1
        if best is None or c < best.cost - 1e-15:
            best = SearchResult(program, c, count)
    best.expanded = count
    return best


# ----------------------------------------------------------------------------- the ratio LP
def _terms(cfg, program: pg.Program, prof: Profile):
    """Every term of `program_cost` as N affine functions of w: (const_r, {j: coeff}) per rank."""
    m, n, speeds = cfg.model_config, cfg.world_size, cost.speeds_of(cfg)
    layers, totals = m.n_layer, {"heads": m.n_head, "columns": 4 * m.n_embd, "rows": cfg.batch_size}
    terms = []
    for op, choice in zip(pg.OPS, program.choices):
        dim = pg.units_dimension(op, choice)
        for ph in PHASES:
            a, b = prof.affine[(op, choice, ph)]
            if dim is None:
                full = prof.full[(op, choice)]
                terms.append([(layers * (a + b * full) / s, {}) for s in speeds])
            else:
                terms.append([(layers * a / s, {r: layers * b * totals[dim] / s})
                              for r, s in enumerate(speeds)])
    link = cost.all_reduce_link(cfg)
    if link is not None and n > 1:
        for e in pg.edges(program):
            for steps in (e.forward, e.backward):
                for step in steps:
                    kind, layout = pg.step_kind(step)
                    if kind == "slice":
                        continue
                    if kind == "all_reduce":
                        busiest = max(cost.hap_step_bytes(kind, layout, e.width, m, cfg.batch_size,
                                                          {}, n, r) for r in range(n))
                        terms.append([(layers * link.cost(busiest, 2 * (n - 1)), {})] * n)
                        continue
                    dim, inner = cost.hap_units(layout, e.width, m, cfg.batch_size)
                    whole = totals[dim] * inner * core_cost.FP32_BYTES / link.bandwidth_Bps
                    gather = kind == "all_gather"  # rank r lacks S_{r+1} (all-gather), S_r
                    terms.append([(layers * (link.cost(0, n - 1) + whole),
                                   {(r + 1) % n if gather else r: -layers * whole})
                                  for r in range(n)])
    sync = sync_seconds(program, cfg)
    if sync:
        terms.append([(sync, {})] * n)
    return terms


def solve_ratios(cfg, program: pg.Program) -> tuple[list[float], float]:
    """HAP's sharding-ratio LP for `program` (module docstring): (w, its continuous cost)."""
    from scipy.optimize import linprog

    n = cfg.world_size
    if n == 1 or not pg.dimensions_used(program):  # nothing is split: any w will do, keep ∝ speed
        w = proportional(cfg)
        return w, program_cost(cfg, program, pg.split(cfg.model_config, cfg.batch_size, w))
    terms = _terms(cfg, program, profile(cfg))
    k = len(terms)
    objective = [0.0] * n + [1.0] * k
    a_ub, b_ub = [], []
    for t, term in enumerate(terms):
        for const, coeffs in term:  # Σ_j coeff_j·w_j − t_k ≤ −const
            row = [0.0] * (n + k)
            for j, c in coeffs.items():
                row[j] += c
            row[n + t] = -1.0
            a_ub.append(row)
            b_ub.append(-const)
    bounds = [(W_MIN, None)] * n + [(None, None)] * k
    result = linprog(objective, A_ub=a_ub, b_ub=b_ub, A_eq=[[1.0] * n + [0.0] * k], b_eq=[1.0],
                     bounds=bounds, method="highs")
    if not result.success:
        raise ValueError(f"the ratio LP failed for program={program.code!r}, "
                         f"speeds={cost.speeds_of(cfg)}: {result.message}")
    # The optimum is often degenerate (a slow rank's fixed work sets every term, and any w that
    # keeps the others below it is optimal): among the optimal w, take the one whose largest
    # share per unit of speed, max_r w_r/s_r, is smallest — ∝ speed where the optimum allows it,
    # and equal shares for equal devices.
    speeds, best = cost.speeds_of(cfg), float(result.fun)
    a_ub2 = [row + [0.0] for row in a_ub] + [objective + [0.0]]
    b_ub2 = b_ub + [best + 1e-9 * max(1.0, abs(best))]
    a_ub2 += [[1.0 / speeds[r] if j == r else 0.0 for j in range(n)] + [0.0] * k + [-1.0]
              for r in range(n)]
    b_ub2 += [0.0] * n
    tied = linprog([0.0] * (n + k) + [1.0], A_ub=a_ub2, b_ub=b_ub2,
                   A_eq=[[1.0] * n + [0.0] * (k + 1)], b_eq=[1.0],
                   bounds=bounds + [(None, None)], method="highs")
    x = tied.x if tied.success else result.x
    return [float(v) for v in x[:n]], best


def proportional(cfg) -> list[float]:
    speeds = cost.speeds_of(cfg)
    return [s / sum(speeds) for s in speeds]


def ratios_of(cfg, program: pg.Program) -> list[float]:
    """w under the configuration's `shard`: even, ∝ speed, or the LP for this program."""
    shard, n = cfg.options.get("shard", "lp"), cfg.world_size
    if shard == "even":
        return [1.0 / n] * n
    if shard == "proportional":
        return proportional(cfg)
    return solve_ratios(cfg, program)[0]


# ----------------------------------------------------------------------------- the alternation
@dataclass
class Round:
    weights: list  # the ratios A* searched at
    program: pg.Program  # what it found
    cost: float  # its cost there
    expanded: int
    solved: list  # the LP's ratios for that program
    solved_cost: float  # its cost at those ratios (whole units)


@dataclass
class Synthesis:
    program: pg.Program
    weights: list
    split: dict
    cost: float
    rounds: list


def synthesise(cfg, start=None) -> Synthesis:
    """HAP's alternation: A* at ratios w (first: ∝ speed), the LP's ratios for the program it
    found, A* again at those, ... until the program stops changing (or `MAX_ROUNDS`)."""
    weights = list(start) if start is not None else proportional(cfg)
    rounds: list[Round] = []
    m, batch = cfg.model_config, cfg.batch_size
    for _ in range(MAX_ROUNDS):
        found = a_star(CostTable(cfg, pg.split(m, batch, weights)))
        solved, _ = solve_ratios(cfg, found.program)
        solved_cost = program_cost(cfg, found.program, pg.split(m, batch, solved))
        rounds.append(Round(weights, found.program, found.cost, found.expanded, solved, solved_cost))
        if len(rounds) > 1 and rounds[-2].program == found.program:
            break
        weights = solved
    last = rounds[-1]
    return Synthesis(last.program, last.solved, pg.split(m, batch, last.solved), last.solved_cost,
                     rounds)


