"""Plots shared by every chapter: per-rank timelines (Gantt), bars, and measured-vs-predicted.

matplotlib is imported inside each function, so ranks that import parlab never pay for it.
"""

from __future__ import annotations

COLORS = {"compute": "#4C72B0", "comm": "#DD8452", "wait": "#C44E52", "idle": "#DDDDDD"}


def timeline(events: list[dict], ax=None, title: str = "", kinds=("compute", "comm", "wait"),
             t_max: float | None = None):
    """Gantt chart: one row per rank; compute on the row, comm in flight above it, waits below.

    `events` as in RunResult.timeline (seconds from the first event).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if ax is None:
        ranks = sorted({e["rank"] for e in events}) or [0]
        _, ax = plt.subplots(figsize=(10, 0.6 + 0.7 * len(ranks)))
    offsets = {"compute": 0.0, "comm": 0.28, "wait": -0.28, "idle": 0.0}
    heights = {"compute": 0.5, "comm": 0.22, "wait": 0.22, "idle": 0.5}
    for e in events:
        if e["kind"] not in kinds:
            continue
        y = e["rank"] + offsets.get(e["kind"], 0.0)
        h = heights.get(e["kind"], 0.3)
        ax.broken_barh([(e["t0"] * 1e3, max((e["t1"] - e["t0"]) * 1e3, 1e-3))], (y - h / 2, h),
                       facecolors=COLORS.get(e["kind"], "gray"), edgecolor="none")
    ranks = sorted({e["rank"] for e in events})
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    if t_max is not None:
        ax.set_xlim(0, t_max * 1e3)
    ax.set_title(title)
    ax.legend(handles=[Patch(color=COLORS[k], label=k) for k in kinds], loc="upper right",
              fontsize="small", ncol=len(kinds))
    return ax


def predicted_vs_measured(x, measured, predicted, ax=None, xlabel="", ylabel="", title="",
                          logx=True, logy=True, label=""):
    """Measured points and the model's line over the same x."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    line = ax.plot(x, predicted, "--", label=f"{label} predicted".strip())[0]
    ax.plot(x, measured, "o", color=line.get_color(), label=f"{label} measured".strip())
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


def stacked_bars(rows: dict[str, dict[str, float]], ax=None, ylabel="bytes", title=""):
    """One bar per key of `rows`, stacked by the keys of each inner dict (e.g. memory kinds)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    labels = list(rows)
    parts = list(dict.fromkeys(k for inner in rows.values() for k in inner))
    bottom = [0.0] * len(labels)
    for part in parts:
        values = [rows[label].get(part, 0.0) for label in labels]
        ax.bar(labels, values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax
