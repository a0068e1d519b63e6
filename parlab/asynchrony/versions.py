"""The parameter server's bookkeeping: versions, staleness control, who computes what.

Pure Python, no processes: the live server (`parlab.asynchrony.server`) and the closed forms
(`simulate`) drive the same `Book`, so a seeded run is predicted exactly. A gradient's staleness
is the version it is applied at minus the one it was computed on (Ho et al., SSP, NeurIPS 2013).
"ssp" (staleness s): worker w computes its shard of step c's batch once the version is ≥ c − s;
update c is the mean of the W shards (s = 0: `ps-sync`, single's update). "asp" (Downpour SGD,
Dean et al. 2012): job j is step j's whole batch, applied on arrival, staleness unbounded.
Either way `steps` updates of one global batch each. The two models in full:
docs/asynchrony.md, `parlab.asynchrony.versions`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

STOP = -1  # the job number that tells an ASP worker to stop
MODES = ("ssp", "asp")


@dataclass(frozen=True)
class Gradient:
    """One gradient as the server logged it."""

    worker: int  # world rank of the worker that computed it
    job: int  # the step whose batch (ssp: whose shard) it was computed on
    version: int  # the parameter version it was computed on
    applied_at: int  # the version it is applied to (the index of its update)

    @property
    def staleness(self) -> int:
        return self.applied_at - self.version


@dataclass
class Book:
    """What the server knows: version, jobs handed out, gradients waiting, the log."""

    workers: int  # W: world ranks 1..W
    steps: int
    mode: str = "ssp"
    staleness: int = 0  # s of "ssp"
    version: int = 0
    log: list[Gradient] = field(default_factory=list)
    next_job: int = 0  # asp: the next step to hand out
    arrived: dict[int, set] = field(default_factory=dict)  # ssp: clock -> workers in
    waiting: dict[int, int] = field(default_factory=dict)  # ssp: worker -> clock it waits to start

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} must be one of {MODES}")

    def start(self) -> list[tuple[int, int]]:
        """The first (worker, job) replies: ssp: clock 0 to all; asp: jobs 0.. in rank order."""
        if self.mode == "ssp":
            return [(w, 0) for w in range(1, self.workers + 1)]
        return [(w, self._hand_out()) for w in range(1, self.workers + 1)]

    def receive(self, worker: int, job: int, version: int) -> tuple[list[int], list[tuple[int, int]]]:
        """Worker `worker` pushed the gradient of `job` computed on `version`. Returns the jobs
        whose updates to apply now, in order (asp: this one; ssp: clock `job` once complete), and
        the (worker, job) replies to send after applying them (job STOP: stop)."""
        if self.mode == "asp":
            self.log.append(Gradient(worker, job, version, self.version))
            self.version += 1
            return [job], [(worker, self._hand_out())]
        if job - version > self.staleness:
            raise RuntimeError(f"worker {worker} computed clock {job} on version {version}: "
                               f"staleness above s={self.staleness}")
        self.log.append(Gradient(worker, job, version, job))
        self.arrived.setdefault(job, set()).add(worker)
        if job + 1 < self.steps:
            self.waiting[worker] = job + 1
        apply = []
        while len(self.arrived.get(self.version, ())) == self.workers:  # clocks complete in order
            del self.arrived[self.version]
            apply.append(self.version)
            self.version += 1
        released = sorted(w for w, clock in self.waiting.items() if self.version >= clock - self.staleness)
        replies = [(w, self.waiting.pop(w)) for w in released]
        return apply, replies

    def _hand_out(self) -> int:
        if self.next_job >= self.steps:
            return STOP
        self.next_job += 1
        return self.next_job - 1

    @property
    def done(self) -> bool:
        return self.version >= self.steps

    # ------------------------------------------------------------------ what the log says
    def jobs_per_worker(self) -> dict[int, int]:
        counts = Counter(g.worker for g in self.log)
        return {w: counts.get(w, 0) for w in range(1, self.workers + 1)}

    def staleness_histogram(self) -> dict[int, int]:
        return dict(sorted(Counter(g.staleness for g in self.log).items()))


def simulate(book: Book, clock) -> Book:
    """Run `book` to the end with no processes, serving arrivals in `clock`'s order
    (`parlab.asynchrony.delays.VirtualClock`): what a seeded run's server logs, exactly."""
    sent_version = {}

    def reply(pairs):
        for worker, job in pairs:
            if job != STOP:
                sent_version[worker] = (job, book.version)
                clock.dispatch(worker)

    reply(book.start())
    while not book.done:
        worker = clock.next()
        job, version = sent_version.pop(worker)
        _, replies = book.receive(worker, job, version)
        reply(replies)
    return book
