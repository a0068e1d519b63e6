"""The 1F1B baseline as a placement: the op graph cut into contiguous stages, run by 1F1B.

She et al. (2025, arXiv 2503.09357, §5) judge an operator-level plan against a pipeline schedule
of the same model; here the baseline is a 1F1B pipeline of the same graph (ops cut into contiguous
stages in topological order — PipeDream-Flush: Narayanan et al., "Memory-Efficient
Pipeline-Parallel DNN Training", ICML 2021) written as a `PlacementPlan`, so the timing model, the
executor ("placed", `parlab.planner.placement.placed`) and the drawings run it like any plan and the two
differ only in placement and order.
"""

from __future__ import annotations

from parlab.pipeline.schedules import one_f_one_b
from parlab.planner.placement.measured_graph import Graph
from parlab.planner.placement.placed_cost import message_bytes
from parlab.planner.placement.tasks import PlacementPlan, Task


def pipeline_plan(graph: Graph, ranks: int) -> PlacementPlan:
    """1F1B over `ranks` stages: the ops cut into contiguous runs of the topological order with the
    least slowest stage (measured forward + backward; ties: fewer bytes crossing), stage s on rank s."""
    names, (fwd, bwd) = graph.names, graph.times()
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= len(names):
        raise ValueError(f"ranks={ranks!r} must be an int in 1..{len(names)} (one op per stage)")
    best = None
    for cuts in _cuts(len(names), ranks):
        stages = [names[a:b] for a, b in zip((0,) + cuts, cuts + (len(names),))]
        place = {n: s for s, ops in enumerate(stages) for n in ops}
        trial = PlacementPlan("1f1b", ranks, tuple((n, place[n]) for n in names), ((),) * ranks)
        key = (max(sum(fwd[n] + bwd[n] for n in ops) for ops in stages),
               sum(message_bytes(graph, trial)))
        if best is None or key < best[0]:
            best = (key, stages, trial.place)
    _, stages, place = best
    order = []
    for seq in one_f_one_b(ranks, graph.microbatches).actions:
        tasks = []
        for a in seq:  # a stage's forward runs its ops in topological order, its backward reversed
            ops = stages[a.stage] if a.op == "F" else stages[a.stage][::-1]
            tasks += [Task(a.op, n, a.mb) for n in ops]
        order.append(tuple(tasks))
    return PlacementPlan("1f1b", ranks, place, tuple(order), status="stages " + " | ".join(
        ",".join(ops) for ops in stages))


def _cuts(n: int, parts: int, lo: int = 1) -> list[tuple]:
    if parts == 1:
        return [()]
    return [(c,) + rest for c in range(lo, n - parts + 2) for rest in _cuts(n, parts - 1, c + 1)]
