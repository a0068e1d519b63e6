"""A parameter server and its workers as strategies of the one training loop.

Rank 0 serves: it holds the parameters and the optimizer. Ranks 1..W work: they pull the
parameters, compute a gradient, push it (Dean et al., DistBelief / Downpour SGD, 2012; Li et al.,
"Parameter Server", OSDI 2014). Every message goes through `Comm` (so every byte is in the
ledger), one header and one flat tensor each way:

    server -> worker ("pull"): header (2,) int64 [version, job], then params (Ψ,) float32
    worker -> server ("push"): header (2,) int64 [version, job], then grad (Ψ,) float32

The version travels with the gradient: the server logs which version each gradient was computed
on (`parlab.asynchrony.versions.Book`), and the book decides when each worker may start its next
job (staleness control) and when an update is applied. A job of STOP (-1) has no params after it.

Which message the server takes next: with `delays="seeded"` the one the virtual clock says
(`parlab.asynchrony.delays`: blocking recv from that worker, a reproducible run); otherwise the one
that arrives first: a header irecv is posted for every worker computing, each waited in a thread,
the first to complete is served (ties: the lowest rank).

The loop's hooks by role. Server: `sync(step)` serves messages until update `step` is applied (so
its step time is the time per update); `update` only observes memory. Worker: `forward_backward`
is one pull-compute-push, or nothing once stopped. "The loss of step i" is the loss of step i's
global batch at the parameters its gradient(s) were computed on (ssp: the mean over the W shards,
each at its own version; asp: the whole batch at the version its worker pulled), which is
single's loss when nothing is stale. Workers report it by job, not by loop iteration.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_any
from dataclasses import asdict

import torch

from parlab.asynchrony.delays import DelaySchedule, VirtualClock
from parlab.asynchrony.versions import STOP, Book
from parlab.engine.loop import Strategy, step_batch

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


class ParameterServer(Strategy):
    """Rank 0: serve pushes until every update is applied; see the module docstring."""

    def __init__(self, ctx, model, optimizer, book: Book, schedule: DelaySchedule | None):
        super().__init__(ctx, model, optimizer, reports_loss=False, holds_state=True)
        self.book = book
        self.clock = VirtualClock(schedule) if schedule is not None else None
        self.numel = sum(p.numel() for p in model.parameters())
        self.grads: dict[int, dict[int, torch.Tensor]] = {}  # job -> worker -> (Ψ,) gradient
        self.pool = (ThreadPoolExecutor(book.workers, thread_name_prefix="ps-recv")
                     if schedule is None else None)
        self.pending: dict = {}  # future of a header -> worker (real arrival order)
        self.t0 = None
        self.received: list[float] = []  # seconds since start at which each logged gradient arrived
        self.update_times: list[float] = []  # seconds since start at which update i was applied
        self.update_jobs: list[int] = []  # the job (step) whose gradient(s) update i applied

    def batch(self, step):
        return None

    def forward_backward(self, step, batch) -> float:
        return 0.0

    def sync(self, step: int) -> None:
        if self.t0 is None:
            self.t0 = time.perf_counter()
            self.reply(self.book.start())
        while self.book.version <= step:
            self.serve_one()

    def update(self, step: int) -> None:
        self.observe_memory()

    def serve_one(self) -> None:
        worker, header = self.next_arrival()
        version, job = header.tolist()
        grad = torch.empty(self.numel)
        self.ctx.comm.recv(grad, worker, phase="push")  # (Ψ,) the worker's gradient
        self.received.append(time.perf_counter() - self.t0)
        self.grads.setdefault(job, {})[worker] = grad
        apply, replies = self.book.receive(worker, job, version)
        for j in apply:
            self.apply(j)
        self.reply(replies)

    def next_arrival(self) -> tuple[int, torch.Tensor]:
        if self.clock is not None:  # the schedule's order
            worker = self.clock.next()
            header = torch.empty(HEADER, dtype=torch.long)
            return worker, self.ctx.comm.recv(header, worker, phase="push")  # (2,) [version, job]
        done, _ = wait_any(list(self.pending), timeout=self.ctx.cfg.timeout, return_when=FIRST_COMPLETED)
        if not done:
            raise TimeoutError(f"no worker pushed a gradient within timeout={self.ctx.cfg.timeout} s")
        future = min(done, key=lambda f: self.pending[f])
        return self.pending.pop(future), future.result()  # (2,) [version, job]

    def apply(self, job: int) -> None:
        """One optimizer step with the mean of the job's gradients, summed in rank order."""
        by_worker = self.grads.pop(job)
        mean = sum(by_worker[w] for w in sorted(by_worker)) / len(by_worker)  # (Ψ,)
        load_flat(self.model, mean, into="grad")
        with self.ctx.span("optimizer", step=len(self.update_times)):
            self.optimizer.step()
        self.observe_memory()
        self.optimizer.zero_grad(set_to_none=True)
        self.update_times.append(time.perf_counter() - self.t0)
        self.update_jobs.append(job)

    def reply(self, pairs) -> None:
        """Send each (worker, job): the header, and the current parameters unless STOP."""
        for worker, job in pairs:
            comm = self.ctx.comm
            comm.send(torch.tensor([self.book.version, job]), worker, phase="pull")  # (2,) int64
            if job == STOP:
                continue
            comm.send(flat_params(self.model), worker, phase="pull")  # (Ψ,) version book.version
            if self.clock is not None:
                self.clock.dispatch(worker)
            else:
                header = torch.empty(HEADER, dtype=torch.long)
                handle = comm.irecv(header, worker, phase="push")  # (2,) its next push's header
                self.pending[self.pool.submit(handle.wait)] = worker

    def finish(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)

    def extras(self) -> dict:
        log = [dict(asdict(g), staleness=g.staleness, t=t) for g, t in zip(self.book.log, self.received)]
        return {"role": "server", "mode": self.book.mode, "staleness_bound": self.book.staleness,
                "workers": self.book.workers, "log": log, "update_times": self.update_times,
                "update_jobs": self.update_jobs}


class Worker(Strategy):
    """Ranks 1..W: pull, compute, push, once per loop iteration, until stopped."""

    def __init__(self, ctx, model, mode: str, schedule: DelaySchedule):
        workers = ctx.world_size - 1
        super().__init__(ctx, model, None, shard=ctx.rank - 1, shards=workers, holds_state=False)
        self.mode, self.schedule, self.workers = mode, schedule, workers
        self.numel = sum(p.numel() for p in model.parameters())
        self.shares = [0.0] * ctx.cfg.steps  # this rank's share of the loss of each step (job)
        self.computed = 0  # gradients computed so far (k of the delay schedule)
        self.stopped = False

    def batch(self, step):
        return None

    def pull(self) -> tuple[int, int]:
        header = torch.empty(HEADER, dtype=torch.long)
        version, job = self.ctx.comm.recv(header, 0, phase="pull").tolist()  # (2,) [version, job]
        if job != STOP:
            flat = self.ctx.comm.recv(torch.empty(self.numel), 0, phase="pull")  # (Ψ,) parameters
            load_flat(self.model, flat)
        return version, job

    def forward_backward(self, step: int, batch) -> float:
        if self.stopped:
            return 0.0
        version, job = self.pull()
        if job == STOP:
            self.stopped = True
            return 0.0
        if self.mode == "ssp":  # shard w of step `job`'s batch
            x, y = step_batch(self.ctx.cfg, job, self.shard, self.shards)
        else:  # the whole batch of step `job`
            x, y = step_batch(self.ctx.cfg, job)
        t0 = time.perf_counter()
        with self.ctx.span("forward", step=job), self.meter:
            loss = self.model.loss(x, y)
        with self.ctx.span("backward", step=job), self.meter:
            loss.backward()
        slowdown = self.schedule.slowdown(self.ctx.rank, self.computed)
        self.computed += 1
        if slowdown > 1:
            with self.ctx.span("injected delay", step=job):
                time.sleep((slowdown - 1) * (time.perf_counter() - t0))
        comm = self.ctx.comm
        comm.send(torch.tensor([version, job]), 0, phase="push")  # (2,) int64 [version, job]
        comm.send(flat_grads(self.model), 0, phase="push")  # (Ψ,) this gradient
        share = loss.item() / (self.workers if self.mode == "ssp" else 1)
        self.shares[job] += share
        return share

    def update(self, step: int) -> None:
        self.observe_memory()
        self.model.zero_grad(set_to_none=True)

    def finish(self) -> None:
        if self.mode == "asp" and not self.stopped:  # it computed every job: the STOP is due
            _, job = self.pull()
            if job != STOP:
                raise RuntimeError(f"worker {self.ctx.rank} expected STOP, got job {job}")
            self.stopped = True

    def extras(self) -> dict:
        return {"role": "worker", "computed": self.computed}
