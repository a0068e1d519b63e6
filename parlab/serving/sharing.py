"""Two (or more) training jobs sharing the same ranks, run under a schedule (Luo et al.,
"CrossoverScheduler: Overlapping Multiple Distributed Training Applications in a Crossover
Manner", 2021):

    from parlab.serving.jobs import JobSpec
    from parlab.serving.sharing import run_jobs

    a = JobSpec("A", model="gpt", model_config={"n_embd": 16, "n_layer": 2, "n_head": 2}, batch_size=512)
    b = JobSpec("B", model="mlp", batch_size=8192)
    r = run_jobs([a, b], world_size=2, schedule="crossover", steps=4, link="1GbE", clock="A100")
    r.jobs["A"].compare(parlab.run("single", steps=4, **a.single_options()))   # match: True

Each rank builds one process group per job on one shared emulated link and runs the schedule's
threads (`parlab.serving.schedules`). Not a registered scheme: two jobs have two loss curves and
two ledgers. How a run is timed and launched: docs/serving.md, `parlab.serving.sharing`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from parlab.core import clock as clocks
from parlab.core import link as link_mod
from parlab.core import pacer as pacers
from parlab.core.comm import Comm
from parlab.core.launch import launch
from parlab.core.ledger import Ledger
from parlab.core.trace import Timeline, normalize
from parlab.engine.loop import step_times
from parlab.engine.runner import RunResult
from parlab.serving import schedules
from parlab.serving.jobs import Job, JobSpec, Processor, Turns, job_comm, share_link


@dataclass
class JobsResult:
    """Every job's own `RunResult` and what the schedule achieved together."""

    schedule: str
    world_size: int
    steps: int
    link: Any
    wall_s: float  # earliest start to latest end on any rank (the barrier aligns the starts;
    # paced: virtual seconds from 0 to the latest job's end)
    jobs: dict[str, RunResult]
    spans: dict[str, float]  # each job: its first step's start to its last update, slowest rank
    timeline: list[dict] = field(default_factory=list)  # every job's events, args["job"] set
    clock_ledger: list[dict] = field(default_factory=list)  # the two barriers (0 bytes)
    origin: float = 0.0  # the earliest start: timeline 0 (ledger times are raw; paced: 0, virtual)
    clock: Any = clocks.WALL  # parlab.core.clock.Clock: this CPU, raw, or paced time
    pace: dict = field(default_factory=dict)  # paced clock: each job's virtual clocks (RunResult.pace)

    def save_trace(self, path):
        """Every job's timeline as a Chrome/Perfetto trace JSON at `path` (`RunResult.save_trace`)."""
        from parlab.core.trace import save_trace

        return save_trace(self.timeline, path)

    def throughput(self) -> float:
        """Job-steps completed per second, all jobs together."""
        return len(self.jobs) * self.steps / self.wall_s

    def samples_per_s(self) -> dict[str, float]:
        """Each job's training rows per second over its own span."""
        return {name: r.config.batch_size * self.steps / self.spans[name]
                for name, r in self.jobs.items()}


def check(specs: list[JobSpec], world_size: int, schedule: str, steps: int, link,
          clock="wall") -> list:
    """Validate everything before a process starts; return each job's RunConfig."""
    if not isinstance(specs, (list, tuple)) or not specs or \
            not all(isinstance(s, JobSpec) for s in specs):
        raise ValueError(f"specs={specs!r} must be a non-empty list of JobSpec")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names {names} must be distinct")
    if schedule not in schedules.SCHEDULES:
        raise ValueError(f"schedule={schedule!r} must be one of {schedules.SCHEDULES}")
    link_mod.resolve(link)
    return [spec.config(world_size, steps, link=link, clock=clock) for spec in specs]


def run_jobs(specs: list[JobSpec], world_size: int = 2, schedule: str = "crossover",
             steps: int = 4, link=None, timeout: float = 120.0,
             clock="wall") -> JobsResult:
    """Train every job of `specs` for `steps` steps on the same `world_size` ranks under
    `schedule` ("sequential", "concurrent" or "crossover"), on an emulated `link`, on `clock`
    ("wall" or an accelerator's paced time, `parlab.core.clock`)."""
    configs = check(specs, world_size, schedule, steps, link, clock)
    plan = schedules.build(schedule, [s.name for s in specs], steps)
    paced_clock, paced_link = configs[0].clock, configs[0].link
    returned = launch(_rank_main, world_size, list(specs), configs, plan, paced_clock,
                      timeout=timeout, link=paced_link)
    starts = [out["t0"] for out in returned]
    origin = min(starts)
    wall = max(out["t1"] for out in returned) - origin
    jobs, spans, timeline = {}, {}, []
    for spec, cfg in zip(specs, configs):
        per_rank = [out["jobs"][spec.name] for out in returned]
        losses = [sum(values) for values in zip(*(r["losses"] for r in per_rank))]
        events = [{**e, "args": {**e["args"], "job": spec.name}} for r in per_rank
                  for e in r["timeline"]]
        shifted = normalize([{"rank": -1, "kind": "origin", "name": "", "t0": origin, "t1": origin,
                              "args": {}}] + events)[1:]
        timeline += shifted
        marks = [r["marks"] for r in per_rank]
        spans[spec.name] = max(m[-1] for m in marks) - min(m[0] for m in marks)
        jobs[spec.name] = RunResult(losses, per_rank[0]["state"],
                                    [rec for r in per_rank for rec in r["ledger"]], shifted,
                                    [r["memory"] for r in per_rank], spans[spec.name], cfg,
                                    step_times(marks))
    barriers = [rec for out in returned for rec in out["clock"]]
    pace = {spec.name: _pace([out["pace"][spec.name] for out in returned])
            for spec in specs} if paced_clock.paced else {}
    return JobsResult(schedule, world_size, steps, paced_link, wall, jobs, spans,
                      sorted(timeline, key=lambda e: e["t0"]), barriers, origin, paced_clock, pace)


def _pace(stats: list[dict]) -> dict:
    """One job's virtual clocks over its ranks, summed as `RunResult.pace` sums a run's."""
    return {"clock": stats[0]["clock"], "segments": sum(s["segments"] for s in stats),
            "paced_s": sum(s["paced_s"] for s in stats),
            "advanced_s": sum(s["advanced_s"] for s in stats),
            "ops": sum(s["ops"] for s in stats), "flops": sum(s["flops"] for s in stats),
            "end_s": max(s["end_s"] for s in stats)}


# ----------------------------------------------------------------------------- in each rank
def execute(thread: list, jobs: dict[str, Job], turns: Turns | None = None, index: int = 0) -> None:
    """Run one thread of a schedule: each action is one hook of one job (with `turns`, a paced
    run's threads: each hook in its virtual-time turn, `jobs.Turns`)."""
    try:
        for name, hook, step in thread:
            if turns is None:
                jobs[name].run(hook, step)
            else:
                with turns.turn(index, jobs[name].comm.timeline.now()):
                    jobs[name].run(hook, step)
    finally:
        if turns is not None:
            turns.done()


def _rank_main(rank: int, world_size: int, specs: list[JobSpec], configs: list, plan,
               paced=clocks.WALL) -> dict:
    clock = Comm(None, ledger=Ledger(rank), timeline=Timeline(rank), name="clock")
    comms = [job_comm(clock, spec.name) for spec in specs]  # one process group per job
    share_link(comms)
    processor = Processor() if paced.paced else None  # one accelerator per rank
    for comm in comms:  # paced time: each job's compute spans keep its own pacer's time
        comm.timeline.pacer = pacers.Pacer(paced) if paced.paced else None
    jobs = {spec.name: Job(spec, cfg, comm, processor)
            for spec, cfg, comm in zip(specs, configs, comms)}
    clock.barrier(phase="start")
    t0 = 0.0 if paced.paced else time.perf_counter()  # paced: every job's virtual clock starts at 0
    if len(plan) == 1:
        execute(plan[0], jobs)
    else:
        _run_threads(plan, jobs, Turns(len(plan)) if paced.paced else None)
    t1 = (max(job.comm.timeline.now() for job in jobs.values()) if paced.paced
          else time.perf_counter())
    clock.barrier(phase="end")
    out = {}
    for name, job in jobs.items():
        job.observe_memory()
        memory = dict(job.peak_memory)
        memory["activations"] = job.meter.peak
        out[name] = {"losses": job.losses, "state": job.state(), "memory": memory,
                     "marks": job.marks, "ledger": job.ctx.ledger.records,
                     "timeline": job.ctx.timeline.records()}
    pace = {name: job.comm.timeline.pacer.stats() for name, job in jobs.items()} if paced.paced \
        else {}
    return {"t0": t0, "t1": t1, "jobs": out, "clock": clock.ledger.records, "pace": pace}


def _run_threads(plan, jobs: dict[str, Job], turns: Turns | None = None) -> None:
    """One thread per entry of `plan` (paced: taking `turns`). The first exception of any thread
    is raised here at once, without waiting for the others (a job whose peer failed would wait on
    its collective until the timeout): the rank then reports it and `launch` stops every rank."""
    errors: list[BaseException] = []
    changed = threading.Event()

    def body(thread, index):
        try:
            execute(thread, jobs, turns, index)
        except BaseException as err:  # noqa: BLE001 - re-raised in the rank's main thread
            errors.append(err)
        finally:
            changed.set()

    threads = [threading.Thread(target=body, args=(t, i), name=f"job-thread-{i}", daemon=True)
               for i, t in enumerate(plan)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads) and not errors:
        changed.wait(timeout=1.0)
        changed.clear()
    if errors:
        raise errors[0]
