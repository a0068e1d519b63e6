"""Asynchronous block-Jacobi on a virtual clock: a deterministic timetable of sweeps and messages.

The iteration is `parlab.asynchrony.jacobi`'s (Chazan & Miranker 1969; Baudet 1978; Bertsekas &
Tsitsiklis 1989; flexible communication: Miellou, El Baz & Spiteri, Math. Comp. 1998). The virtual
clock is ours, not a paper's: every rank computes the same timetable (`virtual_schedule`: sweeps
of `work_ms`, messages leaving when the link is free and arriving after a seeded exponential
delay), and each sweep reads the newest message arrived by its virtual start; the values still
travel through `Comm`. Ledger records hold virtual times too (`virtual_times`). `clock="wall"`
uses threads and real sleeps instead (`parlab.asynchrony.jacobi_solver`).

Every message: (4 + n,) float64 [stamp, generation, final, virtual send time] + the boundary row,
through `Comm`. The timetable's rules: docs/asynchrony.md, `parlab.asynchrony.jacobi_virtual`.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass

import torch

from parlab.asynchrony.jacobi import META, JacobiConfig, sweep


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
        free = taken + cfg.link_ms / 1e3 + delay  # the link's α + bytes/β, then the injected delay
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


def virtual_times(record: dict, sent: float, arrived: float) -> None:
    """Give a message's ledger record its virtual times: put by its sender at `sent`, at the
    receiver at `arrived` (seconds), in place of this CPU's."""
    record.update(t_start=sent, t_end=arrived)
    if "t_wait" in record:
        record["t_wait"] = sent


def virtual_async_rank(rank: int, world_size: int, cfg: JacobiConfig, comm, block, log):
    """Asynchronous / flexible sweeps on the virtual clock: the timetable says which message each
    update reads; the values come from the neighbours through `Comm` (in stamp order)."""
    table = virtual_schedule(cfg, world_size)
    w, count = table.work_s[rank], table.sweeps[rank]
    neighbours = [r for r in (rank - 1, rank + 1) if 0 <= r < world_size]
    incoming = {p: iter(table.sent[(p, rank)]) for p in neighbours}
    outgoing = {p: {stamp for stamp, _ in table.sent[(rank, p)]} for p in neighbours}
    held = {p: (0, 0, torch.zeros(cfg.n, dtype=torch.float64)) for p in neighbours}  # stamp, gen, row

    def receive(p, expect, arrived):  # p's message `expect`, its record given virtual times
        message = comm.recv(torch.empty(META + cfg.n, dtype=torch.float64), p)  # (4 + n,)
        if int(message[0]) != expect:
            raise RuntimeError(f"rank {rank}: expected stamp {expect} from {p}, got {int(message[0])}")
        virtual_times(comm.ledger.records[-1], expect * table.work_s[p], arrived)
        return message

    def fetch(p, upto):  # receive p's messages, in the order it sends them, up to stamp `upto`
        while held[p][0] < upto:
            expect, arrived = next(incoming[p])
            message = receive(p, expect, arrived)
            held[p] = (expect, int(message[1]), message[META:].clone())

    zero = torch.zeros(cfg.n, dtype=torch.float64)
    generation, handles = 0, []  # (record, sent, arrival, handle) of every isend
    arrival = {p: dict(table.sent[(rank, p)]) for p in neighbours}  # stamp -> its arrival at p
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
                handle = comm.isend(torch.cat([meta, row]), p)  # (4 + n,) to the neighbour
                handles.append((comm.ledger.records[-1], (k + 1) * w, arrival[p][k + 1], handle))
    for p in neighbours:  # drain what is still on its way (the final message at least)
        for expect, arrived in incoming[p]:
            receive(p, expect, arrived)
    for record, sent, arrived, handle in handles:
        handle.wait()
        virtual_times(record, sent, arrived)
    log["sweeps"] = count
    return log, comm.ledger.records
