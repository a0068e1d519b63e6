"""Schedules as data: which job's hook each thread of a rank runs, in order (Luo et al.,
"CrossoverScheduler: Overlapping Multiple Distributed Training Applications in a Crossover
Manner", 2021).

A schedule is a tuple of threads, each a list of actions `(job, hook, step)` with hook one of
`parlab.serving.jobs.HOOKS` (compute, start, wait, update). `sequential`: one job's steps, then
the other's. `concurrent`: one free-running thread per job. `crossover`: one thread alternating
the jobs so each one's communication runs while the other computes: a pair of steps takes about
max(2P, 2C) instead of 2(P + C) (`parlab.serving.cost`). `validate(schedule, jobs, steps)` proves
every job's steps run in order, each hook once, a job on one thread only. The crossover order in
full: docs/serving.md, `parlab.serving.schedules`.
"""

from __future__ import annotations

from parlab.serving.jobs import HOOKS

SCHEDULES = ("sequential", "concurrent", "crossover")


def one_job(job: str, steps: int) -> list[tuple[str, str, int]]:
    """A job alone: every step's four hooks in order."""
    return [(job, hook, step) for step in range(steps) for hook in HOOKS]


def sequential(jobs: list[str], steps: int) -> tuple[list, ...]:
    return ([action for job in jobs for action in one_job(job, steps)],)


def concurrent(jobs: list[str], steps: int) -> tuple[list, ...]:
    return tuple(one_job(job, steps) for job in jobs)


def crossover(jobs: list[str], steps: int) -> tuple[list, ...]:
    thread = []
    for step in range(steps):
        for job in jobs:
            if step > 0:
                thread += [(job, "wait", step - 1), (job, "update", step - 1)]
            thread += [(job, "compute", step), (job, "start", step)]
    for job in jobs:
        thread += [(job, "wait", steps - 1), (job, "update", steps - 1)]
    return (thread,)


def build(name: str, jobs: list[str], steps: int) -> tuple[list, ...]:
    """The schedule `name` (one of SCHEDULES) for `jobs`, each training `steps` steps."""
    if name not in SCHEDULES:
        raise ValueError(f"schedule={name!r} must be one of {SCHEDULES}")
    schedule = {"sequential": sequential, "concurrent": concurrent, "crossover": crossover}[name](
        list(jobs), steps)
    validate(schedule, jobs, steps)
    return schedule


def validate(schedule: tuple[list, ...], jobs: list[str], steps: int) -> None:
    """ValueError naming the first action out of place; None when the schedule is sound."""
    expected = {job: one_job(job, steps) for job in jobs}
    thread_of: dict[str, int] = {}
    for t, thread in enumerate(schedule):
        for action in thread:
            job = action[0]
            if job not in expected:
                raise ValueError(f"action {action} names job {job!r}, not one of {list(jobs)}")
            if thread_of.setdefault(job, t) != t:
                raise ValueError(f"job {job!r} runs on threads {thread_of[job]} and {t}: its "
                                 "collectives would be issued in different orders")
    for job, wanted in expected.items():
        got = [a for thread in schedule for a in thread if a[0] == job]
        for i, want in enumerate(wanted):
            if i >= len(got) or tuple(got[i]) != want:
                seen = tuple(got[i]) if i < len(got) else "nothing"
                raise ValueError(f"job {job!r}: action {i} is {seen}, expected {want}")
        if len(got) > len(wanted):
            raise ValueError(f"job {job!r} has {len(got) - len(wanted)} actions after its last step")
