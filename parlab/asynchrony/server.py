"""A parameter server and its workers as strategies of the one training loop.

Ranks 0..k−1 serve shards of the flat parameter vector, each with its own optimizer (Li et al.,
"Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014: key ranges over
server nodes); ranks k..k+W−1 pull every shard, compute a gradient and push each shard of it
(Dean et al., "Large Scale Distributed Deep Networks", NeurIPS 2012: Downpour SGD). Every
message goes through `Comm`, a header and one flat tensor each way:

    server i -> worker ("pull"): header (2,) int64 [version_i, job], then shard i (Ψ_i,) float32
    worker -> server i ("push"): header (2,) int64 [version_i, job], then grad shard i (Ψ_i,)

On a paced clock the server takes the least virtual (arrival, rank) message (conservative
synchronisation, Chandy & Misra 1979), so a run repeats to the bit. The books, which message a
server takes next, the leader under "asp" and the loop's hooks by role: docs/asynchrony.md,
`parlab.asynchrony.server`.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_any
from dataclasses import asdict

import torch

from parlab.asynchrony.delays import DelaySchedule, VirtualClock
from parlab.asynchrony.versions import STOP, Book
from parlab.core.cost import chunk_bounds, shard_sizes
from parlab.engine.loop import Strategy, build_model, make_optimizer, step_batch

HEADER = 2  # int64 elements: [version, job]


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])  # (Ψ,)


def flat_grads(model) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in model.parameters()])  # (Ψ,)


def load_flat(model, flat: torch.Tensor, into: str = "data") -> None:
    """Copy (Ψ,) `flat` into the parameters (`into="data"`) or their gradients ("grad")."""
    params = list(model.parameters())
    with torch.no_grad():
        for p, piece in zip(params, flat.split([p.numel() for p in params])):
            if into == "data":
                p.copy_(piece.view_as(p))  # (Ψ_p,) -> p's shape
            else:
                p.grad = piece.view_as(p).clone()  # (Ψ_p,) -> p's shape


def shard_bounds(numel: int, servers: int) -> list[tuple[int, int]]:
    """[lo, hi) of each server's slice of the flat parameter vector."""
    return chunk_bounds(shard_sizes(numel, servers))


class Shard(torch.nn.Module):
    """What a server holds: its slice (Ψ_i,) of the flat parameters, as one trainable tensor."""

    def __init__(self, values: torch.Tensor):
        super().__init__()
        self.flat = torch.nn.Parameter(values.clone())  # (Ψ_i,)


def assemble(outputs, cfg) -> dict:
    """The full state from the servers' shards, in server order, cut back into named tensors."""
    flat = torch.cat([out.state["flat"] for out in outputs if out.state is not None])  # (Ψ,)
    names = [(name, p.shape) for name, p in build_model(cfg).named_parameters()]
    pieces = flat.split([shape.numel() for _, shape in names])
    return {name: piece.view(shape).clone() for (name, shape), piece in zip(names, pieces)}


class ParameterServer(Strategy):
    """Server rank i < k: serve pushes until every update is applied; see the module docstring."""

    def __init__(self, ctx, model, book: Book, schedule: DelaySchedule | None, servers: int = 1):
        lo, hi = shard_bounds(sum(p.numel() for p in model.parameters()), servers)[ctx.rank]
        shard = Shard(flat_params(model)[lo:hi])  # (Ψ_i,)
        super().__init__(ctx, shard, make_optimizer(shard.parameters(), ctx.cfg), reports_loss=False,
                         holds_state=True)
        self.book, self.servers = book, servers
        self.leader = ctx.rank == 0
        self.clock = VirtualClock(schedule) if schedule is not None else None
        self.numel = hi - lo
        self.grads: dict[int, dict[int, torch.Tensor]] = {}  # job -> worker -> (Ψ_i,) gradient
        self.paced = ctx.timeline.pacer is not None  # virtual time: arrival order, no threads
        self.pool = (ThreadPoolExecutor(book.workers, thread_name_prefix="ps-recv")
                     if schedule is None and not self.paced else None)
        # the header irecvs in flight: wall clock, future -> worker (real arrival order); paced,
        # worker -> Handle (virtual arrival order, waited on this thread: the pacer is not
        # thread-safe)
        self.pending: dict = {}
        self.stopped: set[int] = set()  # asp followers: workers whose STOP header came
        self.t0 = None
        # seconds since the server started (virtual seconds on a paced clock): when each logged
        # gradient arrived, and when update i was applied
        self.received: list[float] = []
        self.update_times: list[float] = []
        self.update_jobs: list[int] = []  # the job (step) whose gradient(s) update i applied

    def rank_of(self, worker: int) -> int:
        return self.servers - 1 + worker

    def now(self) -> float:
        """The server's time: virtual on a paced clock, `time.perf_counter()` on the wall clock."""
        return self.ctx.timeline.now()

    def batch(self, step):
        return None

    def forward_backward(self, step, batch) -> float:
        return 0.0

    def sync(self, step: int) -> None:
        if self.t0 is None:
            self.t0 = self.now()
            self.reply(self.book.start())
        while self.book.version <= step:
            self.serve_one()

    def update(self, step: int) -> None:
        self.observe_memory()

    def serve_one(self) -> None:
        worker, header = self.next_arrival()
        version, job = header.tolist()
        if job == STOP:  # an asp follower: this worker is done
            self.stopped.add(worker)
            return
        grad = torch.empty(self.numel)
        self.ctx.comm.recv(grad, self.rank_of(worker), phase="push")  # (Ψ_i,) the worker's gradient
        self.received.append(self.now() - self.t0)
        self.grads.setdefault(job, {})[worker] = grad
        apply, replies = self.book.receive(worker, job, version)
        for j in apply:
            self.apply(j)
        self.reply(replies)

    def next_arrival(self) -> tuple[int, torch.Tensor]:
        if self.clock is not None:  # the schedule's order
            worker = self.clock.next()
            header = torch.empty(HEADER, dtype=torch.long)
            return worker, self.ctx.comm.recv(header, self.rank_of(worker), phase="push")  # (2,)
        if self.paced:  # the least virtual (arrival, rank): every pending sender has posted
            worker = min(self.pending, key=lambda w: (self.pending[w].arrival(), w))
            return worker, self.pending.pop(worker).wait()  # (2,) [version, job]
        done, _ = wait_any(list(self.pending), timeout=self.ctx.cfg.timeout, return_when=FIRST_COMPLETED)
        if not done:
            raise TimeoutError(f"no worker pushed a gradient within timeout={self.ctx.cfg.timeout} s")
        future = min(done, key=lambda f: self.pending[f])
        return self.pending.pop(future), future.result()  # (2,) [version, job]

    def lr_scale(self, by_worker: dict) -> float:
        """The factor on the learning rate of an update (1; `ps-dualbatch` scales by batch size)."""
        return 1.0

    def apply(self, job: int) -> None:
        """One optimizer step with the mean of the job's gradients, summed in rank order."""
        by_worker = self.grads.pop(job)
        mean = sum(by_worker[w] for w in sorted(by_worker)) / len(by_worker)  # (Ψ_i,)
        self.model.flat.grad = mean
        scale = self.lr_scale(by_worker)
        for group in self.optimizer.param_groups:
            group["lr"] = self.ctx.cfg.lr * scale
        with self.ctx.span("optimizer", step=len(self.update_times)):
            self.optimizer.step()
        self.observe_memory()
        self.optimizer.zero_grad(set_to_none=True)
        self.update_times.append(self.now() - self.t0)
        self.update_jobs.append(job)

    def reply(self, pairs) -> None:
        """Send each (worker, job): the header, and this shard unless the leader's STOP (an asp
        follower always sends its shard: the leader decides who stops)."""
        comm = self.ctx.comm
        follower_asp = not self.leader and self.book.mode == "asp"
        for worker, job in pairs:
            rank = self.rank_of(worker)
            comm.send(torch.tensor([self.book.version, job]), rank, phase="pull")  # (2,) int64
            if job == STOP and not follower_asp:
                continue
            comm.send(self.model.flat.detach(), rank, phase="pull")  # (Ψ_i,) version book.version
            if self.clock is not None:
                if job != STOP:  # seeded: every book agrees with the leader's
                    self.clock.dispatch(worker)
            else:
                header = torch.empty(HEADER, dtype=torch.long)
                handle = comm.irecv(header, rank, phase="push")  # (2,) its next push's header (or STOP)
                if self.paced:
                    self.pending[worker] = handle
                else:
                    self.pending[self.pool.submit(handle.wait)] = worker

    def finish(self) -> None:
        if not self.leader and self.book.mode == "asp":  # every worker's STOP header
            if self.clock is not None:
                for worker in range(1, self.book.workers + 1):
                    header = torch.empty(HEADER, dtype=torch.long)
                    self.ctx.comm.recv(header, self.rank_of(worker), phase="push")  # (2,) STOP
            while self.pending:
                worker, header = self.next_arrival()
                if header[1].item() != STOP:
                    raise RuntimeError(f"server {self.ctx.rank}: worker {worker} pushed after the end")
        if self.pool is not None:
            self.pool.shutdown(wait=True)

    def extras(self) -> dict:
        log = [dict(asdict(g), staleness=g.staleness, t=t) for g, t in zip(self.book.log, self.received)]
        return {"role": "server", "mode": self.book.mode, "staleness_bound": self.book.staleness,
                "workers": self.book.workers, "servers": self.servers, "log": log,
                "update_times": self.update_times, "update_jobs": self.update_jobs}


class Worker(Strategy):
    """Ranks k..k+W−1: pull, compute, push, once per loop iteration, until stopped."""

    def __init__(self, ctx, model, mode: str, schedule: DelaySchedule, servers: int = 1):
        workers = ctx.world_size - servers
        super().__init__(ctx, model, None, shard=ctx.rank - servers, shards=workers, holds_state=False)
        self.mode, self.schedule, self.workers, self.servers = mode, schedule, workers, servers
        self.id = ctx.rank - servers + 1  # the book's worker id
        self.bounds = shard_bounds(sum(p.numel() for p in model.parameters()), servers)
        self.versions = [0] * servers  # the version of each shard last pulled
        self.shares = [0.0] * ctx.cfg.steps  # this rank's share of the loss of each step (job)
        self.computed = 0  # gradients computed so far (k of the delay schedule)
        self.stopped = False

    def batch(self, step):
        return None

    def pull(self) -> int:
        """Every server's header and shard (the leader's header says the job); returns the job."""
        comm, flat = self.ctx.comm, flat_params(self.model)  # (Ψ,)
        job = None
        for server, (lo, hi) in enumerate(self.bounds):
            header = torch.empty(HEADER, dtype=torch.long)
            version, told = comm.recv(header, server, phase="pull").tolist()  # (2,) [version, job]
            job = told if server == 0 else job
            if job == STOP and server == 0:
                continue
            self.versions[server] = version
            flat[lo:hi] = comm.recv(torch.empty(hi - lo), server, phase="pull")  # (Ψ_i,) shard
            if job == STOP:  # an asp follower's last shard, drained: tell it this worker is done
                comm.send(torch.tensor([version, STOP]), server, phase="push")  # (2,) int64
        if job != STOP:
            load_flat(self.model, flat)
        return job

    def job_batch(self, job: int):
        """The rows this worker computes for `job` (ssp: its shard of step job; asp: the whole)."""
        if self.mode == "ssp":
            return step_batch(self.ctx.cfg, job, self.shard, self.shards)
        return step_batch(self.ctx.cfg, job)

    def forward_backward(self, step: int, batch) -> float:
        if self.stopped:
            return 0.0
        job = self.pull()
        if job == STOP:
            self.stopped = True
            return 0.0
        x, y = self.job_batch(job)
        timeline = self.ctx.timeline
        t0 = timeline.now()
        with self.ctx.span("forward", step=job), self.meter:
            loss = self.model.loss(x, y)
        with self.ctx.span("backward", step=job), self.meter:
            loss.backward()
        slowdown = self.schedule.slowdown(self.id, self.computed)
        self.computed += 1
        if slowdown > 1:  # (slowdown − 1) × the compute's time: virtual on a paced clock
            took = timeline.now() - t0
            with self.ctx.span("injected delay", step=job):  # no operators: not paced again
                if timeline.pacer is not None:
                    timeline.advance((slowdown - 1) * took)  # virtual time, nothing sleeps
                else:
                    time.sleep((slowdown - 1) * took)
        comm, grads = self.ctx.comm, flat_grads(self.model)  # (Ψ,)
        # every message of the push is issued before any is waited (they queue on the link in
        # this order all the same): a server that takes pushes in virtual arrival order waits
        # until every worker has posted its push to it, so none may still wait for an earlier
        # server to take its gradient first
        handles = []
        for server, (lo, hi) in enumerate(self.bounds):
            handles.append(comm.isend(torch.tensor([self.versions[server], job]), server,
                                      phase="push"))  # (2,) int64
            handles.append(comm.isend(grads[lo:hi].contiguous(), server,
                                      phase="push"))  # (Ψ_i,) this gradient's shard
        for handle in handles:
            handle.wait()
        share = loss.item() / (self.workers if self.mode == "ssp" else 1)
        self.shares[job] += share
        return share

    def update(self, step: int) -> None:
        self.observe_memory()
        self.model.zero_grad(set_to_none=True)

    def finish(self) -> None:
        if self.mode == "asp" and not self.stopped:  # it computed every job: the STOP is due
            job = self.pull()
            if job != STOP:
                raise RuntimeError(f"worker {self.ctx.rank} expected STOP, got job {job}")
            self.stopped = True

    def extras(self) -> dict:
        return {"role": "worker", "computed": self.computed}
