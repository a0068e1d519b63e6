"""One data-parallel training job among several on the same ranks: its own process group, its own
ledger and timeline, its own model and optimizer, and a step cut into four hooks that a schedule
can interleave with another job's (Luo et al., "CrossoverScheduler: Overlapping Multiple
Distributed Training Applications in a Crossover Manner", 2021).

The step is the one loop's with `sync` split into `start_sync` (issue the bucketed all-reduces)
and `wait_sync`; between the two the rank may compute another job's step — the gap crossover
fills. The math is `ddp-bucketed`'s, so a job equals its own `single` run whatever the schedule.
`JobSpec.config(world_size, steps)` is that configuration, validated by the registry. In full:
docs/serving.md, `parlab.serving.jobs`.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from parlab.core.comm import Comm
from parlab.core.ledger import Ledger
from parlab.core.memory import tensor_bytes
from parlab.core.trace import Timeline
from parlab.data_parallel.bucket_packing import Buckets
from parlab.engine.loop import Strategy, build_model, make_optimizer
from parlab.engine.runner import make_config

HOOKS = ("compute", "start", "wait", "update")  # one step of a job, in this order


class Processor:
    """A rank's one accelerator, shared by the jobs on a paced clock: a lock, and the virtual time
    its last holder released it. Each job keeps its own virtual clock (its timeline's pacer,
    `parlab.core.pacer`), so a job that takes the processor starts its compute no earlier, on its
    own clock, than the holder's release on the holder's (`Timeline.wait_until`). Which job takes
    it first is virtual time's: one thread (`sequential`, `crossover`) runs the hooks in the
    schedule's order; one thread per job (`concurrent`) runs them in `Turns`' order."""

    def __init__(self):
        self.lock = threading.Lock()
        self.free_at = 0.0  # paced time of the last release

    @contextmanager
    def hold(self, timeline: Timeline):
        """Hold the processor for a job whose compute spans are on `timeline`."""
        with self.lock:
            timeline.wait_until(self.free_at)
            try:
                yield
            finally:
                self.free_at = timeline.now()


class Turns:
    """A paced clock with one thread per job (`concurrent`): the jobs' hooks run one at a time, in
    virtual-time order. A thread asks for its next hook's turn at its job's virtual now; the turn
    goes to the least (virtual now, thread) once every thread still running has asked
    (conservative synchronisation within the rank: no thread can still ask for an earlier one,
    Chandy & Misra 1979). The processor (`Processor`) and the shared link (`share_link`) then see
    the jobs' work in an order that virtual time alone decides — the same on every rank of
    identical ranks and on every run, however the operating system schedules the threads — so a
    paced concurrent run repeats to the bit. A hook that waits for its all-reduce keeps the turn
    while its peers catch up: they take the same turns, so they issue that all-reduce before
    their own wait for it."""

    def __init__(self, threads: int):
        self.cond = threading.Condition()
        self.asking: dict[int, float] = {}  # thread -> the virtual time it asks at
        self.running = False
        self.left = threads  # threads not finished

    def _mine(self, thread: int) -> bool:
        return (not self.running and len(self.asking) == self.left
                and min(self.asking, key=lambda i: (self.asking[i], i)) == thread)

    @contextmanager
    def turn(self, thread: int, t: float):
        """Run the body when it is thread `thread`'s turn, asking at virtual time `t`."""
        with self.cond:
            self.asking[thread] = t
            self.cond.notify_all()
            self.cond.wait_for(lambda: self._mine(thread))
            del self.asking[thread]
            self.running = True
        try:
            yield
        finally:
            with self.cond:
                self.running = False
                self.cond.notify_all()

    def done(self) -> None:
        """A thread ran its last hook (or failed): the others no longer wait for it to ask."""
        with self.cond:
            self.left -= 1
            self.cond.notify_all()


@dataclass(frozen=True)
class JobSpec:
    """What one job trains: `model` ("gpt" or "mlp") with `model_config` overrides, its global
    batch, seed, optimizer and learning rate, and the gradient bucket size (MiB)."""

    name: str
    model: str = "mlp"
    model_config: dict = field(default_factory=dict)
    batch_size: int = 12
    seed: int = 0
    optimizer: str = "adamw"
    lr: float | None = None
    bucket_mb: float = 0.05

    def config(self, world_size: int, steps: int, link=None, clock="wall"):
        """The `ddp-bucketed` RunConfig of this job alone on `link` and `clock` (its `.link` is
        the link a paced run emulates); ValueError names any bad value."""
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name={self.name!r} must be a non-empty string")
        return make_config("ddp-bucketed", world_size=world_size, model=self.model, steps=steps,
                           link=link, clock=clock,
                           seed=self.seed, batch_size=self.batch_size, optimizer=self.optimizer,
                           lr=self.lr, model_config=dict(self.model_config) or None,
                           bucket_mb=self.bucket_mb)

    def single_options(self) -> dict:
        """Keyword arguments of `parlab.run("single", steps=..., **these)`: the same job, one process."""
        return {"model": self.model, "seed": self.seed, "batch_size": self.batch_size,
                "optimizer": self.optimizer, "lr": self.lr,
                "model_config": dict(self.model_config) or None}


class JobContext:
    """What a Strategy needs from a run, for one job on one rank: its comm, ledger, timeline, cfg."""

    def __init__(self, name: str, cfg, comm: Comm):
        self.name, self.cfg, self.comm = name, cfg, comm
        self.ledger, self.timeline = comm.ledger, comm.timeline
        self.rank, self.world_size = comm.rank, comm.size

    def span(self, name: str, kind: str = "compute", **args):
        return self.timeline.span(name, kind, job=self.name, **args)


def job_comm(world: Comm, name: str) -> Comm:
    """A new process group over all of `world`'s ranks, with its own ledger and timeline.

    Collective: every rank calls it, for every job, in the same order (torch.distributed.new_group).
    """
    comm = world.split([list(range(world.size))], name)
    comm.ledger, comm.timeline = Ledger(world.ledger.rank), Timeline(world.ledger.rank)
    return comm


def share_link(comms: list[Comm]) -> None:
    """Make the jobs' comms queue on one emulated link, as their messages share one NIC: without
    this each job would get a link of its own and concurrency would double the bandwidth."""
    for comm in comms[1:]:
        comm.share_port(comms[0])


class Job(Strategy):
    """One data-parallel job on this rank: this rank's rows of every step's global batch, flat
    gradient buckets all-reduced (average) between `start_sync` and `wait_sync`."""

    def __init__(self, spec: JobSpec, cfg, comm: Comm, processor=None):
        ctx = JobContext(spec.name, cfg, comm)
        self.processor = processor  # paced clock: the rank's one `Processor`, else None
        model = build_model(cfg)
        super().__init__(ctx, model, make_optimizer(model.parameters(), cfg), shard=comm.rank,
                         shards=comm.size)
        self.name, self.comm = spec.name, comm
        self.buckets = Buckets([p for p in model.parameters() if p.requires_grad], spec.bucket_mb)
        self.handles: list = []
        self.losses: list[float] = []
        self.marks: list[float] = []  # each step's start (its compute), then the end of the job

    # the four hooks a schedule calls
    def compute(self, step: int) -> None:
        self.marks.append(self.comm.timeline.now())
        with self.ctx.ledger.label(step=step):
            self.losses.append(self.forward_backward(step, self.batch(step)))

    def start_sync(self, step: int) -> None:
        with self.ctx.ledger.label(step=step, phase="grad-sync"):
            for bucket in self.buckets:
                flat = self.buckets.pack(bucket)  # (bucket numel,) gradients side by side
                self.handles.append(self.comm.all_reduce(flat, op="avg", async_op=True))  # (numel,)

    def wait_sync(self, step: int) -> None:
        for bucket, handle in zip(self.buckets, self.handles):
            handle.wait()  # (bucket numel,) the average over every rank, in place
            self.buckets.unpack(bucket)
        self.handles = []

    def run(self, hook: str, step: int) -> None:
        """Run one of HOOKS for `step`; compute and update hold the rank's processor (paced)."""
        if self.processor is not None and hook in ("compute", "update"):
            with self.processor.hold(self.comm.timeline):
                self._run(hook, step)
        else:
            self._run(hook, step)

    def _run(self, hook: str, step: int) -> None:
        if hook == "compute":
            self.compute(step)
        elif hook == "start":
            self.start_sync(step)
        elif hook == "wait":
            self.wait_sync(step)
        else:
            self.update(step)
            if step == self.ctx.cfg.steps - 1:
                self.marks.append(self.comm.timeline.now())

    def memory(self) -> dict:
        """Measured bytes held now: params, grads, optimizer state, the flat bucket buffers."""
        memory = super().memory()
        memory["comm_buffers"] = tensor_bytes(b.buffer for b in self.buckets)
        return memory
