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

Clocks. `clock="virtual"` (the default): time is a virtual clock, so a run is a pure function of
its configuration, repeatable on any machine. A sweep lasts `work_ms` virtual milliseconds
(`straggler`× that on the last rank) and never sleeps; a message leaves when its sender's link is
free and arrives after its seeded exponential delay. Every rank computes the same timetable
(`virtual_schedule`: which boundaries are sent, when each arrives, how many sweeps each rank does)
and each sweep reads, per neighbour, the newest message that has arrived by its virtual start; the
values themselves still travel between the rank processes through `Comm`, a rank blocking only
until the message the timetable says it holds is there (causality: it was sent at an earlier
virtual time). Synchronous sweeps carry their virtual time in the message and start at the later
of their own and their neighbours'. `clock="wall"`: receiver and sender threads and real sleeps, as
described above: the order depends on this CPU's scheduling (raw).

Every message: (4 + n,) float64 [stamp, generation, final, virtual send time] + the boundary row,
through `Comm`.
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
CLOCKS = ("virtual", "wall")
META = 4  # [stamp, generation, final, virtual send time] before the row


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
    clock: str = "virtual"  # "virtual": a deterministic timetable; "wall": threads, real sleeps

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
        return (f"virtual time: a sweep = {self.work_ms:g} ms, {self.straggler:g}× on the last rank"
                + (f", messages delayed {self.delay_ms:g} ms on average" if self.delay_ms else ""))

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


@dataclass(frozen=True)
class Timetable:
    """The virtual clock's timetable of a run: every rank's sweep length and count, and per
    directed link (sender, receiver) the (stamp, arrival time) of every message sent, in order."""

    work_s: tuple  # seconds one sweep of each rank lasts
    sweeps: tuple  # sweeps each rank does
    sent: dict  # (sender, receiver) -> [(stamp, arrival seconds)], stamps increasing

    def newest(self, sender: int, receiver: int, t: float) -> int:
        """The stamp of the newest message from `sender` that has reached `receiver` by time t
        (0: none yet)."""
        messages = self.sent[(sender, receiver)]
        i = bisect.bisect_right([a for _, a in messages], t)
        return messages[i - 1][0] if i else 0


def _first_sweep_ending_by(t: float, work_s: float) -> int:
    """The smallest k >= 1 with k·work_s >= t."""
    k = max(1, math.ceil(t / work_s))
    while k > 1 and (k - 1) * work_s >= t:
        k -= 1
    while k * work_s < t:
        k += 1
    return k


def _link(cfg: JacobiConfig, sender: int, receiver: int, puts: list) -> list:
    """One link of the asynchronous sender: whenever the link is free it takes the newest message
    put so far (an unsent older one is replaced), waits its seeded delay, delivers it."""
    rng = random.Random(cfg.seed * 1_000_003 + sender * 101 + receiver)
    sent, free, i = [], 0.0, 0
    while i < len(puts):
        taken = max(free, puts[i][1])
        while i + 1 < len(puts) and puts[i + 1][1] <= taken:
            i += 1
        delay = rng.expovariate(1.0 / cfg.delay_ms) / 1e3 if cfg.delay_ms else 0.0
        free = taken + delay
        sent.append((puts[i][0], free))
        i += 1
    return sent


def virtual_schedule(cfg: JacobiConfig, ranks: int) -> Timetable:
    """The asynchronous run's timetable on the virtual clock, a pure function of (cfg, ranks).

    Sweep k of rank r ends at k·w_r (it never waits). It puts its boundary row for each neighbour
    at the end of an update (every `inner` sweeps; every sweep under "flexible") and of its last
    sweep (the final message). The last rank stops after `sweeps` sweeps; every other rank after
    the first sweep that ends once a final message has reached it (finals travel leftwards from
    the straggler), so sweep counts follow from the links' timetables, right to left."""
    w = tuple(cfg.work_ms / 1e3 * (cfg.straggler if r == ranks - 1 else 1.0) for r in range(ranks))

    def puts(r, count):
        return [(k, k * w[r]) for k in range(1, count + 1)
                if k % cfg.inner == 0 or cfg.mode == "flexible" or k == count]

    sweeps = [0] * ranks
    sent = {}
    sweeps[ranks - 1] = cfg.sweeps
    for r in range(ranks - 2, -1, -1):  # the final message from r + 1 decides r's last sweep
        sent[(r + 1, r)] = _link(cfg, r + 1, r, puts(r + 1, sweeps[r + 1]))
        sweeps[r] = _first_sweep_ending_by(sent[(r + 1, r)][-1][1], w[r])
    for r in range(ranks - 1):
        sent[(r, r + 1)] = _link(cfg, r, r + 1, puts(r, sweeps[r]))
    return Timetable(w, tuple(sweeps), sent)


def _virtual_async_rank(rank: int, world_size: int, cfg: JacobiConfig, comm, block, log):
    """Asynchronous / flexible sweeps on the virtual clock: the timetable says which message each
    update reads; the values come from the neighbours through `Comm` (in stamp order)."""
    table = virtual_schedule(cfg, world_size)
    w, count = table.work_s[rank], table.sweeps[rank]
    neighbours = [r for r in (rank - 1, rank + 1) if 0 <= r < world_size]
    incoming = {p: iter(table.sent[(p, rank)]) for p in neighbours}
    outgoing = {p: {stamp for stamp, _ in table.sent[(rank, p)]} for p in neighbours}
    held = {p: (0, 0, torch.zeros(cfg.n, dtype=torch.float64)) for p in neighbours}  # stamp, gen, row

    def fetch(p, stamp):  # receive p's messages, in the order it sends them, up to `stamp`
        while held[p][0] < stamp:
            expect, _ = next(incoming[p])
            message = comm.recv(torch.empty(META + cfg.n, dtype=torch.float64), p)  # (4 + n,)
            if int(message[0]) != expect:
                raise RuntimeError(f"rank {rank}: expected stamp {expect} from {p}, got {int(message[0])}")
            held[p] = (expect, int(message[1]), message[META:].clone())

    zero = torch.zeros(cfg.n, dtype=torch.float64)
    generation, handles = 0, []
    for k in range(count):
        if k % cfg.inner == 0:  # a new update: the newest halos that arrived by its start
            for p in neighbours:
                fetch(p, table.newest(p, rank, k * w))
            reads = {p: held[p] for p in neighbours}
        top = reads[rank - 1][2] if rank - 1 in reads else zero
        bottom = reads[rank + 1][2] if rank + 1 in reads else zero
        block = sweep(block, top, bottom, cfg)  # (rows, n)
        generation = 1 + min([generation] + [reads[p][1] for p in neighbours])
        log["t"].append((k + 1) * w)
        log["generation"].append(generation)
        log["blocks"].append(block.clone())
        log["used"].append({p: reads[p][0] for p in neighbours})
        for p in neighbours:
            if k + 1 in outgoing[p]:
                row = block[0] if p < rank else block[-1]  # (n,) the row the neighbour needs
                meta = torch.tensor([k + 1, generation, float(k + 1 == count), (k + 1) * w],
                                    dtype=torch.float64)
                handles.append(comm.isend(torch.cat([meta, row]), p))  # (4 + n,) to the neighbour
    for p in neighbours:  # drain what is still on its way (the final message at least)
        for _ in incoming[p]:
            comm.recv(torch.empty(META + cfg.n, dtype=torch.float64), p)  # (4 + n,)
    for handle in handles:
        handle.wait()
    log["sweeps"] = count
    return log, comm.ledger.records


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
    virtual = cfg.clock == "virtual"
    if virtual and cfg.mode != "sync":
        return _virtual_async_rank(rank, world_size, cfg, comm, block, log)
    now = 0.0  # virtual time (synchronous sweeps on the virtual clock)

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
        if virtual:
            now += work_s
        else:
            time.sleep(max(0.0, work_s - (time.perf_counter() - t_start)))  # the emulated sweep cost
        k += 1
        if cfg.mode == "sync":
            done = k >= cfg.sweeps
        else:
            done = (rank == world_size - 1 and k >= cfg.sweeps) or any(h.final for h in halos.values())
        log["t"].append(now if virtual else time.perf_counter())
        log["generation"].append(generation)
        log["blocks"].append(block.clone())
        log["used"].append({p: reads[p][1] for p in neighbours})
        if not (done or k % cfg.inner == 0 or cfg.mode == "flexible"):
            continue  # mid-update: only flexible communication sends the partial values
        waited = now
        for peer in neighbours:
            row = block[0] if peer < rank else block[-1]  # (n,) the row the neighbour needs
            meta = torch.tensor([k, generation, float(done), now], dtype=torch.float64)
            message = torch.cat([meta, row])  # (4 + n,)
            if cfg.mode != "sync":
                outboxes[peer].put(message)
            else:
                handle = comm.isend(message, peer)  # (4 + n,) to the neighbour
                received = comm.recv(torch.empty(META + cfg.n, dtype=torch.float64), peer)  # (4 + n,)
                halos[peer].offer(received)
                handle.wait()
                waited = max(waited, float(received[3]))
        if cfg.mode == "sync":
            now = max(now, waited)  # the next sweep starts once both halos are there
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


def solve(ranks: int, cfg: JacobiConfig, timeout: float = 120.0) -> JacobiRun:
    """Run block-Jacobi on `ranks` processes; every rank's log and ledger come back."""
    from parlab.core.launch import launch

    if not (isinstance(ranks, int) and 1 <= ranks <= cfg.n):
        raise ValueError(f"ranks={ranks!r} must be an int in [1, n={cfg.n}]: one strip of rows each")
    t0 = time.perf_counter()
    out = launch(jacobi_rank, ranks, cfg, timeout / 2, timeout=timeout)
    return JacobiRun(cfg, ranks, [log for log, _ in out], [r for _, records in out for r in records],
                     time.perf_counter() - t0)
