"""Asynchronous iterations: block-Jacobi on ranks: synchronous, totally asynchronous, flexible.

The problem: −Δu + σu = 1 on the unit square, zero on the boundary, an n×n interior grid with the
5-point stencil (h = 1/(n+1)). One Jacobi sweep sets every unknown to

    u[i, j] ← (h²·1 + u[i−1, j] + u[i+1, j] + u[i, j−1] + u[i, j+1]) / (4 + σh²)

an iteration x ← Mx + c with M ≥ 0 and row sums of M at most γ = 4/(4 + σh²) < 1: a contraction
in the max norm. Rank r owns a strip of rows and needs one halo row from each neighbour.

- "sync": every sweep waits for both halos of the previous sweep (isend/irecv, then wait).
- "async" (Chazan & Miranker 1969; Baudet 1978; Bertsekas & Tsitsiklis 1989): never wait. Per
  neighbour a receiver thread keeps the newest halo that has arrived (by sweep stamp: an older
  message arriving late is dropped) and a sender thread sends the newest boundary whenever the
  link is free (an unsent older one is replaced, so a fast rank never floods a slow one); every
  sweep uses whatever halo is there. Injected delays: each message waits an exponentially
  distributed time (seeded, unbounded) before it leaves. The run ends when the last rank has done
  `sweeps` sweeps; the others keep sweeping until they hear so (a `final` flag on the halos).

- "flexible" (flexible communication: Miellou, El Baz & Spiteri, "A new class of asynchronous
  iterative algorithms with order intervals", Math. Comp. 1998): asynchronous, and a rank sends
  partial updates: the values of an update still under way. An update is `inner` relaxations of
  the strip with its halos frozen (a two-stage block method); "sync" and "async" send after the
  last of them, "flexible" after every one (inner = 1: the same as "async"). For M ≥ 0 and u₀ = 0
  every value only grows toward u*, so every partial value lies in the order interval
  [u₀, u*] the theory asks for, and the max-norm contraction bound below still holds.

Every sweep (relaxation) costs `work_ms` (an emulated larger strip), `straggler`× that on the last
rank; `sweeps` counts relaxations.

Macroiterations. Every block value carries a generation: 1 + the smallest generation among the
values its sweep read (its own previous block and both halos); the initial guess has generation
0. Generation m means a chain of m complete rounds of updates lies behind the value. For a
max-norm contraction every round shrinks the error by γ, whatever the delays, so a block of
generation g has ‖u − u*‖∞ ≤ γ^g·‖u₀ − u*‖∞ (Bertsekas & Tsitsiklis's asynchronous convergence
theorem: tested per sweep). Synchronous sweeps have generation = sweep count; asynchronous ones
count sweeps faster than generations.

Every message: (4 + n,) float64 [stamp, generation, final, unused] + the boundary row, through `Comm`.
"""

from __future__ import annotations

import bisect
import math
import random
import threading
import time
from dataclasses import dataclass

import torch

from parlab.core.cost import chunk_bounds, shard_sizes

MODES = ("sync", "async", "flexible")
META = 4  # [stamp, generation, final, unused] before the row


@dataclass(frozen=True)
class JacobiConfig:
    n: int = 32  # interior grid points per side
    sigma_h2: float = 0.2  # σh²: the diagonal shift that makes γ = 4/(4 + σh²)
    mode: str = "sync"
    sweeps: int = 300  # sweeps of the last rank (of every rank when synchronous)
    work_ms: float = 0.5  # emulated cost of one sweep (a larger strip's compute)
    straggler: float = 1.0  # the last rank's sweeps take that many times longer
    delay_ms: float = 0.0  # async: mean injected delay of a message (exponential: unbounded)
    seed: int = 0
    inner: int = 1  # relaxations per update with the halos frozen (flexible: a send after each)

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
        for name in ("sigma_h2", "work_ms", "delay_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r} must be a finite number >= 0")
        if self.mode == "sync" and self.delay_ms:
            raise ValueError(f"delay_ms={self.delay_ms} needs mode='async': synchronous sweeps wait anyway")

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


class Halo:
    """The newest halo from one neighbour, kept by a receiver thread (async) or set in place."""

    def __init__(self, n: int):
        self.row = torch.zeros(n, dtype=torch.float64)
        self.stamp, self.generation, self.final = 0, 0, False
        self.lock = threading.Lock()

    def offer(self, message: torch.Tensor) -> None:
        stamp, generation, final = int(message[0]), int(message[1]), bool(message[2])
        with self.lock:
            self.final = self.final or final
            if stamp > self.stamp:  # a late, older message does not overwrite a newer halo
                self.stamp, self.generation, self.row = stamp, generation, message[META:].clone()

    def read(self):
        with self.lock:
            return self.row, self.stamp, self.generation


class Outbox:
    """The newest unsent message to one neighbour (async): a newer one replaces it, so a fast rank
    never floods a slow one — it sends its latest boundary whenever the link is free."""

    def __init__(self):
        self.cond = threading.Condition()
        self.message = None

    def put(self, message: torch.Tensor) -> None:
        with self.cond:
            if self.message is None or not self.message[2]:  # never replace the final message
                self.message = message
            self.cond.notify()

    def take(self, timeout: float) -> torch.Tensor:
        with self.cond:
            if not self.cond.wait_for(lambda: self.message is not None, timeout):
                raise TimeoutError("nothing to send within the timeout")
            message, self.message = self.message, None
            return message


def jacobi_rank(rank: int, world_size: int, cfg: JacobiConfig, timeout: float = 60.0):
    """One strip of the grid; returns (its log, the ledger records)."""
    from parlab.core.comm import Comm

    comm = Comm(None, link=None)
    lo, hi = rows_of(cfg.n, world_size, rank)
    block = torch.zeros(hi - lo, cfg.n, dtype=torch.float64)  # (rows, n) initial guess 0
    generation = 0
    neighbours = [r for r in (rank - 1, rank + 1) if 0 <= r < world_size]
    halos = {r: Halo(cfg.n) for r in neighbours}
    outboxes = {r: Outbox() for r in neighbours}
    zero = torch.zeros(cfg.n, dtype=torch.float64)
    log = {"rank": rank, "rows": (lo, hi), "t": [], "generation": [], "blocks": [], "used": []}
    work_s = cfg.work_ms / 1e3 * (cfg.straggler if rank == world_size - 1 else 1.0)

    def receive_all(peer):  # async: every message from `peer` until its final one
        while True:
            message = comm.recv(torch.empty(META + cfg.n, dtype=torch.float64), peer)  # (4 + n,)
            halos[peer].offer(message)
            if message[2]:
                return

    def send_all(peer):  # async: the newest boundary, after a seeded delay, until the final one
        rng = random.Random(cfg.seed * 1_000_003 + rank * 101 + peer)
        while True:
            message = outboxes[peer].take(timeout)
            if cfg.delay_ms:
                time.sleep(rng.expovariate(1.0 / cfg.delay_ms) / 1e3)  # unbounded, mean delay_ms
            comm.send(message, peer)  # (4 + n,) stamp, generation, final, row
            if message[2]:
                return

    threads = []
    if cfg.mode != "sync":
        threads = [threading.Thread(target=f, args=(p,), daemon=True)
                   for p in neighbours for f in (receive_all, send_all)]
        for thread in threads:
            thread.start()
    done, k = False, 0
    while not done:
        if k % cfg.inner == 0:  # a new update: the newest halos, frozen for its relaxations
            reads = {p: halos[p].read() for p in neighbours}
        top = reads[rank - 1][0] if rank - 1 in reads else zero
        bottom = reads[rank + 1][0] if rank + 1 in reads else zero
        t_start = time.perf_counter()
        block = sweep(block, top, bottom, cfg)  # (rows, n)
        generation = 1 + min([generation] + [reads[p][2] for p in neighbours])
        time.sleep(max(0.0, work_s - (time.perf_counter() - t_start)))  # the emulated sweep cost
        k += 1
        if cfg.mode == "sync":
            done = k >= cfg.sweeps
        else:
            done = (rank == world_size - 1 and k >= cfg.sweeps) or any(h.final for h in halos.values())
        log["t"].append(time.perf_counter())
        log["generation"].append(generation)
        log["blocks"].append(block.clone())
        log["used"].append({p: reads[p][1] for p in neighbours})
        if not (done or k % cfg.inner == 0 or cfg.mode == "flexible"):
            continue  # mid-update: only flexible communication sends the partial values
        for peer in neighbours:
            row = block[0] if peer < rank else block[-1]  # (n,) the row the neighbour needs
            meta = torch.tensor([k, generation, float(done), 0.0], dtype=torch.float64)
            message = torch.cat([meta, row])  # (4 + n,)
            if cfg.mode != "sync":
                outboxes[peer].put(message)
            else:
                handle = comm.isend(message, peer)  # (4 + n,) to the neighbour
                halos[peer].offer(comm.recv(torch.empty(META + cfg.n, dtype=torch.float64), peer))
                handle.wait()
    for thread in threads:
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"rank {rank}: a neighbour's final halo never came within {timeout} s")
    log["sweeps"] = k
    return log, comm.ledger.records


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
        return min(log["t"][0] for log in self.logs)

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


def solve(ranks: int, cfg: JacobiConfig, timeout: float = 120.0) -> JacobiRun:
    """Run block-Jacobi on `ranks` processes; every rank's log and ledger come back."""
    from parlab.core.launch import launch

    if not (isinstance(ranks, int) and 1 <= ranks <= cfg.n):
        raise ValueError(f"ranks={ranks!r} must be an int in [1, n={cfg.n}]: one strip of rows each")
    t0 = time.perf_counter()
    out = launch(jacobi_rank, ranks, cfg, timeout / 2, timeout=timeout)
    return JacobiRun(cfg, ranks, [log for log, _ in out], [r for _, records in out for r in records],
                     time.perf_counter() - t0)
