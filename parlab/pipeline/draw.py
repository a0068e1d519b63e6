"""Gantt charts of pipeline schedules: one row per rank, one bar per F / B / W, labelled with its
micro-batch (with interleaving, "micro-batch.chunk": 0.1 is micro-batch 0 on the rank's second
model chunk) — the figures of the GPipe, Megatron and Zero Bubble papers, drawn from data. The
legend sits outside the axes, right of the last bars.

The same function draws a schedule's ideal timeline (`cost.ideal_timeline`) and a run's measured
one (`RunResult.timeline`), so the two can be put side by side on a common time axis.
"""

from __future__ import annotations

OP_COLORS = {"F": "#4C72B0", "B": "#55A868", "W": "#DD8452"}


def gantt(events: list[dict], ax=None, title: str = "", unit: float = 1e3, label: bool = True,
          xlabel: str | None = None):
    """Draw F / B / W events (ideal or measured); `unit` scales seconds (1e3: milliseconds)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    events = [e for e in events if e["kind"] == "compute" and e["name"] in OP_COLORS]
    ranks = sorted({e["rank"] for e in events}) or [0]
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.5 + 0.55 * len(ranks)))
    origin = min((e["t0"] for e in events), default=0.0)
    stages = {e["args"]["stage"] for e in events}
    many_chunks = len(stages) > len(ranks)
    for e in events:
        x0, width = (e["t0"] - origin) * unit, (e["t1"] - e["t0"]) * unit
        ax.broken_barh([(x0, width)], (e["rank"] - 0.4, 0.8), facecolors=OP_COLORS[e["name"]],
                       edgecolor="white", linewidth=0.5)
        if label:
            a = e["args"]
            text = f"{a['mb']}" if not many_chunks else f"{a['mb']}.{a['stage'] // len(ranks)}"
            ax.text(x0 + width / 2, e["rank"], text, ha="center", va="center",
                    fontsize=5.5 if many_chunks else 7,  # "mb.chunk" on bars v times narrower
                    color="white", clip_on=True)
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel or ("time (ms)" if unit == 1e3 else "time"))
    ax.set_title(title, fontsize="medium")
    ops = sorted({e["name"] for e in events}, key="FBW".index)
    names = {"F": "F forward", "B": "B backward" if "W" not in ops else "B input grad",
             "W": "W weight grad"}
    handles = [Patch(color=OP_COLORS[o], label=names[o]) for o in ops]
    if label:  # what the number on a bar means
        handles.append(Patch(color="none", label="label: micro-batch.chunk" if many_chunks
                             else "label: micro-batch"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="x-small",
              frameon=False)  # outside the axes: never over the last bars
    return ax


def ideal_and_measured(ideal: list[dict], measured: list[dict], title: str = ""):
    """Two stacked Gantt charts: the schedule's ideal timeline over the measured one."""
    import matplotlib.pyplot as plt

    ranks = len({e["rank"] for e in ideal}) or 1
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 1.4 + 1.1 * ranks))
    gantt(ideal, top, f"{title} — ideal (simulated from measured stage times)".strip(" —"))
    gantt(measured, bottom, f"{title} — measured".strip(" —"))
    fig.tight_layout()
    return fig
