"""Drawing an operator placement: the plan's predicted schedule and a run's measured step, one
Gantt chart per rank (forward blue, backward green), each bar labelled with its op and micro-batch.

She et al. (2025, arXiv 2503.09357) place and order operators across ranks; a plan is DATA
(`parlab.planner.placement.tasks.PlacementPlan`), timed by `evaluate` (α-β messages, measured op
times) and drawn here with `parlab.viz.timeline` — the same drawing for the prediction (`draw`)
and for one step of a run of the "placed" scheme (`draw_run`), so the two read side by side.
"""

from __future__ import annotations

from parlab.core.link import Link, resolve
from parlab.planner.explore.placement_run import makespans, tasks_of
from parlab.planner.placement.measured_graph import Graph
from parlab.planner.placement.tasks import PlacementPlan, evaluate

SHORT = {"stem": "st", "mlp_up": "up", "mlp_down": "dn", "attn": "at", "conv": "cv", "merge": "mg",
         "head": "hd"}


def _gantt(ax, bars, ranks, title, comm=()):
    """`parlab.viz.timeline` of the bars (rank, t0, t1, task), each labelled with its op and
    micro-batch; `comm`: the run's communication and wait events, drawn above and below."""
    from parlab.viz import timeline
    events = [{"rank": r, "kind": "compute", "name": "forward" if task[0] == "F" else "backward",
               "t0": t0, "t1": t1, "args": {}} for r, t0, t1, task in bars] + list(comm)
    ax = timeline(events, ax=ax, title=title, step=None)
    span = max((t1 for _, _, t1, _ in bars), default=0.0)
    for rank, t0, t1, task in bars:  # a label only where its bar is wide enough to hold it
        if t1 - t0 >= 0.035 * span:
            ax.text((t0 + t1) / 2 * 1e3, rank, f"{SHORT.get(task[1], task[1])}{task[2]}",
                    ha="center", va="center", fontsize=6, color="white", clip_on=True)
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
    ax.set_xlabel("time (ms); labels: op and micro-batch ("
                  + ", ".join(f"{v} {k}" for k, v in SHORT.items()) + "); narrow ops unlabelled")
    ax.figure.tight_layout()
    return ax


def draw(graph: Graph, plan: PlacementPlan, link: Link | str | None = None, ax=None):
    """The plan's predicted schedule (α-β messages, measured op times): F blue, B green."""
    import matplotlib.pyplot as plt
    timing = evaluate(graph, plan, resolve(link))
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.6 + 0.6 * plan.ranks))
    place = plan.placement
    bars = [(place[t.op], timing.start[t], timing.end[t], tuple(t)) for t in timing.start]
    bubble = ", ".join(f"{b:.0%}" for b in timing.bubble)
    return _gantt(ax, bars, plan.ranks, f"{plan.name} predicted: {timing.makespan * 1e3:.2f} ms, "
                  f"idle per rank {bubble}")


def draw_run(run, step: int | None = None, ax=None):
    """One measured step of a run (default: the last), drawn like `draw`."""
    import matplotlib.pyplot as plt
    step = run.config.steps - 1 if step is None else step
    ranks = run.config.world_size
    events = tasks_of(run, step)
    t0 = min(e["t0"] for e in events)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.6 + 0.6 * ranks))
    bars = [(e["rank"], e["t0"] - t0, e["t1"] - t0, e["args"]["task"]) for e in events]
    t1 = max(e["t1"] for e in events)
    comm = [{**e, "t0": max(e["t0"], t0) - t0, "t1": min(e["t1"], t1) - t0}
            for e in run.timeline if e["kind"] in ("comm", "wait") and e["t1"] > t0 and e["t0"] < t1]
    plan = run.config.options["plan"]
    return _gantt(ax, bars, ranks, f"{plan.name} measured, step {step}: "
                  f"{makespans(run)[step] * 1e3:.2f} ms", comm)
