"""The block-Jacobi solver on ranks: each rank's strip, synchronous or asynchronous, and `solve`.

The iteration, its modes and its convergence bound are `parlab.asynchrony.jacobi`'s (Chazan &
Miranker 1969; Baudet 1978; Bertsekas & Tsitsiklis 1989; flexible communication: Miellou, El Baz
& Spiteri, Math. Comp. 1998). "sync" exchanges both halos every update; "async" and "flexible"
never wait: per neighbour a receiver thread keeps the newest halo (`Halo`) and a sender thread
sends the newest boundary when the link is free (`Outbox`). On the virtual clock (the default)
they follow `parlab.asynchrony.jacobi_virtual`'s timetable instead; `clock="wall"` uses the
threads (raw). Every message: (4 + n,) float64 [stamp, generation, final, virtual send time] +
the boundary row, through `Comm`. In full: docs/asynchrony.md, `parlab.asynchrony.jacobi_solver`.
"""

from __future__ import annotations

import random
import threading
import time

import torch

from parlab.asynchrony.jacobi import META, JacobiConfig, JacobiRun, rows_of, sweep
from parlab.asynchrony.jacobi_virtual import virtual_async_rank, virtual_times


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
    virtual = cfg.clock == "virtual"
    if virtual and cfg.mode != "sync":
        return virtual_async_rank(rank, world_size, cfg, comm, block, log)
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
                sent = comm.ledger.records[-1]
                received = comm.recv(torch.empty(META + cfg.n, dtype=torch.float64), peer)  # (4 + n,)
                halos[peer].offer(received)
                handle.wait()
                link_s = cfg.link_ms / 1e3  # synchronous: no injected delay, only the link's
                waited = max(waited, float(received[3]) + link_s)
                if virtual:
                    virtual_times(sent, now, now + link_s)
                    virtual_times(comm.ledger.records[-1], float(received[3]), float(received[3]) + link_s)
        if cfg.mode == "sync":
            now = max(now, waited)  # the next sweep starts once both halos are there
    for thread in threads:
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"rank {rank}: a neighbour's final halo never came within {timeout} s")
    log["sweeps"] = k
    return log, comm.ledger.records


def solve(ranks: int, cfg: JacobiConfig, timeout: float = 120.0) -> JacobiRun:
    """Run block-Jacobi on `ranks` processes; every rank's log and ledger come back."""
    from parlab.core.launch import launch

    if not (isinstance(ranks, int) and 1 <= ranks <= cfg.n):
        raise ValueError(f"ranks={ranks!r} must be an int in [1, n={cfg.n}]: one strip of rows each")
    t0 = time.perf_counter()
    out = launch(jacobi_rank, ranks, cfg, timeout / 2, timeout=timeout)
    return JacobiRun(cfg, ranks, [log for log, _ in out], [r for _, records in out for r in records],
                     time.perf_counter() - t0)
