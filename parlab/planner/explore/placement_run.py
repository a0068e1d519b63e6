"""Running operator placements for the notebook: a plan through `parlab.run("placed")`, the
reference through `parlab.run("single")`, and what a run says about the plan.

She et al. (2025, arXiv 2503.09357) place and order operators; the executor is
`parlab.planner.placement.placed` (scheme "placed"), the model `parlab.models.op_graph`. Here: `run_plan`
(a `PlacementPlan` for `steps` SGD steps), `reference` (the single process, cached), and views of
a RunResult in the plan's terms — per-step makespan (first rank's start to the last rank's last
task), idle fraction per rank, each task's measured seconds (for replaying the timing model),
the ledger's bytes per step, and the measured memory per step.
"""

from __future__ import annotations

import functools
import statistics

import parlab
from parlab.core.link import Link
from parlab.planner.placement.measured_graph import Graph
from parlab.planner.placement.tasks import PlacementPlan, Task

__all__ = ["run_plan", "reference", "tasks_of", "makespans", "later", "bubble", "task_seconds",
           "sent_bytes", "step_memory"]


def run_plan(graph: Graph, plan: PlacementPlan, steps: int = 3, link: Link | str | None = None,
             lr: float = 0.1, **options):
    """`plan` run for `steps` SGD steps by the "placed" scheme on `plan.ranks` ranks: a RunResult."""
    return parlab.run("placed", world_size=plan.ranks, link=link, plan=plan,
                      microbatches=graph.microbatches, **graph.run_options(steps, lr), **options)


@functools.lru_cache(maxsize=8)
def reference(graph: Graph, steps: int = 3, lr: float = 0.1):
    """The single-process run of the same model, data and optimizer: what every plan reproduces."""
    return parlab.run("single", **graph.run_options(steps, lr))


def tasks_of(run, step: int) -> list[dict]:
    """The run's compute spans of one step, each a task of the plan (args: step, task)."""
    return [e for e in run.timeline if e["kind"] == "compute" and "task" in e["args"]
            and e["args"]["step"] == step]


def makespans(run) -> list[float]:
    """Per step: the first rank's start (after the step's barrier) to the last rank's last task."""
    marks = [out.extras["marks"] for out in run.outputs]
    return [max(m[s][1] for m in marks) - min(m[s][0] for m in marks)
            for s in range(len(marks[0]))]


def later(values: list) -> list:
    """The steps after the first (which pays for warm-up), or the one step there is."""
    return values[1:] or values


def bubble(run) -> list[float]:
    """Per rank: median over the steps after the first of the idle fraction 1 − busy/makespan."""
    spans, steps = makespans(run), range(len(makespans(run)))
    busy = [[sum(e["t1"] - e["t0"] for e in tasks_of(run, s) if e["rank"] == r)
             for r in range(run.config.world_size)] for s in steps]
    return [statistics.median(later([1 - busy[s][r] / spans[s] for s in steps]))
            for r in range(run.config.world_size)]


def task_seconds(run) -> dict[Task, float]:
    """Each task's duration in this run: the median over the steps after the first."""
    first = 1 if run.config.steps > 1 else 0
    seen: dict[Task, list] = {}
    for s in range(first, run.config.steps):
        for e in tasks_of(run, s):
            seen.setdefault(Task(*e["args"]["task"]), []).append(e["t1"] - e["t0"])
    return {t: statistics.median(v) for t, v in seen.items()}


def sent_bytes(run, step: int = 0) -> list[int]:
    """Bytes each rank sent in `step`, from the ledger."""
    return run.bytes_per_rank(step=step)


def step_memory(run) -> list[list[int]]:
    """Per step, per rank: weights + the most bytes its live forwards saved (measured)."""
    return [list(col) for col in zip(*(out.extras["step_memory"] for out in run.outputs))]
