"""Asynchronous iterations: block-Jacobi on ranks: synchronous, totally asynchronous, flexible.

The problem: −Δu + σu = 1 on the unit square, zero on the boundary, an n×n interior grid with the
5-point stencil (h = 1/(n+1)); one sweep is a max-norm contraction with γ = 4/(4 + σh²) < 1.
Rank r owns a strip of rows and needs one halo row from each neighbour.
"sync" waits for both halos every sweep; "async" never waits (Chazan & Miranker 1969; Baudet,
JACM 1978; Bertsekas & Tsitsiklis 1989); "flexible" also sends partial updates (Miellou, El Baz &
Spiteri, "A new class of asynchronous iterative algorithms with order intervals", Math. Comp.
1998). A block of macroiteration generation g has ‖u − u*‖∞ ≤ γ^g·‖u₀ − u*‖∞ (Bertsekas &
Tsitsiklis's asynchronous convergence theorem: tested per sweep).

Here: the problem, its configuration and a run's logs (`JacobiRun`); the ranks are in
`jacobi_solver`, the virtual timetable in `jacobi_virtual`. The sweep, the three modes and the
generation argument: docs/asynchrony.md, `parlab.asynchrony.jacobi`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import torch

from parlab.core.cost import chunk_bounds, shard_sizes

MODES = ("sync", "async", "flexible")
CLOCKS = ("virtual", "wall")
META = 4  # [stamp, generation, final, virtual send time] before the row


@dataclass(frozen=True)
class JacobiConfig:
    n: int = 32  # interior grid points per side
    sigma_h2: float = 0.2  # σh²: the diagonal shift that makes γ = 4/(4 + σh²)
    mode: str = "sync"
    sweeps: int = 300  # sweeps of the last rank (of every rank when synchronous)
    work_ms: float = 0.5  # ms of one sweep on the virtual clock (chapter 09: priced_sweep_ms)
    straggler: float = 1.0  # the last rank's sweeps take that many times longer
    delay_ms: float = 0.0  # async: mean injected delay of a message (exponential: unbounded)
    seed: int = 0
    inner: int = 1  # relaxations per update with the halos frozen (flexible: a send after each)
    clock: str = "virtual"  # "virtual": a deterministic timetable; "wall": threads, real sleeps
    link_ms: float = 0.0  # one halo message on the link (α + bytes/β), virtual clock
    priced: str = ""  # the accelerator whose price of a sweep `work_ms` is ("": a given number)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} must be one of {MODES}")
        if not (isinstance(self.n, int) and self.n >= 2):
            raise ValueError(f"n={self.n!r} must be an int >= 2")
        if not (isinstance(self.sweeps, int) and self.sweeps >= 1):
            raise ValueError(f"sweeps={self.sweeps!r} must be an int >= 1")
        if not (isinstance(self.inner, int) and self.inner >= 1):
            raise ValueError(f"inner={self.inner!r} must be an int >= 1")
        if not (isinstance(self.straggler, (int, float)) and math.isfinite(self.straggler)
                and self.straggler >= 1):
            raise ValueError(f"straggler={self.straggler!r} must be a finite number >= 1")
        for name in ("sigma_h2", "work_ms", "delay_ms", "link_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r} must be a finite number >= 0")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock={self.clock!r} must be one of {CLOCKS}")
        if self.clock == "virtual" and self.mode != "sync" and not self.work_ms > 0:
            raise ValueError(f"work_ms={self.work_ms!r} must be > 0 on the virtual clock with "
                             f"mode={self.mode!r}: asynchronous sweeps of no duration never end")
        if self.mode == "sync" and self.delay_ms:
            raise ValueError(f"delay_ms={self.delay_ms} needs mode='async': synchronous sweeps wait anyway")

    @property
    def label(self) -> str:
        """What the run's times are: virtual milliseconds of a sweep, or this CPU's raw clock."""
        if self.clock == "wall":
            return "this CPU, raw"
        delay = f", messages delayed {self.delay_ms:.3g} ms on average" if self.delay_ms else ""
        if self.priced:
            return (f"{self.priced} time (paced): a sweep of the strip {self.work_ms * 1e3:.3g} µs (its "
                    f"operators priced on the {self.priced}), {self.straggler:g}× on the last rank "
                    f"(injected); a halo message {self.link_ms * 1e3:.3g} µs on the link"
                    + delay + " (injected)" * bool(delay))
        return (f"virtual time: a sweep = {self.work_ms:g} ms, {self.straggler:g}× on the last rank"
                + delay)

    @property
    def gamma(self) -> float:
        """Max-norm contraction factor of one sweep (largest row sum of M)."""
        return 4.0 / (4.0 + self.sigma_h2)


def rows_of(n: int, ranks: int, rank: int) -> tuple[int, int]:
    return chunk_bounds(shard_sizes(n, ranks))[rank]


def sweep(block, top, bottom, cfg: JacobiConfig):
    """One Jacobi sweep of a strip: block (rows, n), halos (n,) each -> new block (rows, n)."""
    n = cfg.n
    h2 = 1.0 / (n + 1) ** 2
    padded = torch.cat([top[None], block, bottom[None]])  # (rows + 2, n)
    left = torch.nn.functional.pad(block[:, :-1], (1, 0))  # (rows, n): u[i, j-1], 0 at the wall
    right = torch.nn.functional.pad(block[:, 1:], (0, 1))  # (rows, n): u[i, j+1]
    return (h2 + padded[:-2] + padded[2:] + left + right) / (4.0 + cfg.sigma_h2)


def exact_solution(cfg: JacobiConfig) -> torch.Tensor:
    """u* (n, n) by a dense solve of the same linear system."""
    n = cfg.n
    eye = torch.eye(n, dtype=torch.float64)
    line = 2 * eye - torch.diag(torch.ones(n - 1, dtype=torch.float64), 1) \
        - torch.diag(torch.ones(n - 1, dtype=torch.float64), -1)
    a = torch.kron(line, eye) + torch.kron(eye, line) + cfg.sigma_h2 * torch.eye(n * n, dtype=torch.float64)
    b = torch.full((n * n,), 1.0 / (n + 1) ** 2, dtype=torch.float64)
    return torch.linalg.solve(a, b).reshape(n, n)  # (n², ) -> (n, n)


def residual(u: torch.Tensor, cfg: JacobiConfig) -> float:
    """‖b − A u‖∞ / ‖b‖∞ of a full iterate u (n, n): one sweep's change, scaled."""
    zero = torch.zeros(cfg.n, dtype=u.dtype)
    return ((sweep(u, zero, zero, cfg) - u).abs().max() * (4.0 + cfg.sigma_h2)).item() \
        * (cfg.n + 1) ** 2


@dataclass
class JacobiRun:
    cfg: JacobiConfig
    ranks: int
    logs: list[dict]
    ledger: list[dict]
    wall_s: float

    def sweeps(self) -> list[int]:
        return [log["sweeps"] for log in self.logs]

    def iterate_at(self, t: float) -> torch.Tensor:
        """The global iterate (n, n) at time t: each strip's newest block finished by then."""
        parts = []
        for log in self.logs:
            lo, hi = log["rows"]
            done = bisect.bisect_right(log["t"], t)  # sweeps finished by t
            parts.append(log["blocks"][done - 1] if done else torch.zeros(hi - lo, self.cfg.n,
                                                                        dtype=torch.float64))
        return torch.cat(parts)  # (n, n) strips stacked in row order

    def start(self) -> float:
        """Time zero: the virtual clock's 0, or the first sweep's end on the wall clock."""
        return 0.0 if self.cfg.clock == "virtual" else min(log["t"][0] for log in self.logs)

    def macro_times(self) -> list[float]:
        """T_m: the first time every strip holds a value of generation >= m (m = 1, 2, ...)."""
        top = min(max(log["generation"]) for log in self.logs)
        return [max(next(t for t, g in zip(log["t"], log["generation"]) if g >= m) for log in self.logs)
                for m in range(1, top + 1)]

    def residual_by_macroiteration(self) -> list[float]:
        return [residual(self.iterate_at(t), self.cfg) for t in self.macro_times()]

    def residual_by_time(self, points: int = 60) -> tuple[list[float], list[float]]:
        t0, t1 = self.start(), max(log["t"][-1] for log in self.logs)
        times = [t0 + (t1 - t0) * i / (points - 1) for i in range(points)]
        return [t - t0 for t in times], [residual(self.iterate_at(t), self.cfg) for t in times]

    def time_to(self, tol: float) -> float:
        """Seconds from the start until the global residual is first ≤ tol (inf: never)."""
        events = sorted(t for log in self.logs for t in log["t"])
        lo, hi = 0, len(events)  # the residual falls, but not monotonically: scan the first hit
        stride = max(1, len(events) // 400)
        for i in range(0, len(events), stride):
            if residual(self.iterate_at(events[i]), self.cfg) <= tol:
                hi = i
                break
        else:
            return math.inf
        lo = max(0, hi - stride)
        for t in events[lo:hi + 1]:
            if residual(self.iterate_at(t), self.cfg) <= tol:
                return t - self.start()
        return events[hi] - self.start()
