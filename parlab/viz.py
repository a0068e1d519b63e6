"""Plots shared by every chapter: per-rank timelines (Gantt), bars, and measured-vs-predicted.

matplotlib is imported inside each function, so ranks that import parlab never pay for it.
"""

from __future__ import annotations

COLORS = {"compute": "#4C72B0", "comm": "#DD8452", "wait": "#C44E52", "idle": "#DDDDDD"}
# what a reader looks for in a step: each compute phase its own colour, communication, waiting
PHASES = {"forward": "#4C72B0", "backward": "#55A868", "optimizer": "#8172B2",
          "compute (other)": "#64B5CD", "communication": "#DD8452", "wait (blocked)": "#C44E52",
          "idle": "#DDDDDD"}


def _phase(e: dict) -> str:
    if e["kind"] == "compute":
        return e["name"] if e["name"] in ("forward", "backward", "optimizer") else "compute (other)"
    return {"comm": "communication", "wait": "wait (blocked)"}.get(e["kind"], e["kind"])


def step_window(events: list[dict], step="auto") -> tuple[float, float, int] | None:
    """(start, end, step) of one training step across all ranks, from compute events tagged with
    `args["step"]`: from the step's first compute on any rank to the next step's first compute (the
    last step: to the last event). step="auto": a step after the first (start-up skew) that has a
    successor, else the last one. None when the events carry no steps."""
    starts: dict[int, float] = {}
    for e in events:
        k = e.get("args", {}).get("step")
        if e["kind"] == "compute" and isinstance(k, int):
            starts[k] = min(starts.get(k, e["t0"]), e["t0"])
    if not starts:
        return None
    steps = sorted(starts)
    if step == "auto":
        middle = [k for k in steps[1:-1]]
        step = middle[-1] if middle else steps[-1]
    if step not in starts:
        raise ValueError(f"step={step!r} is not in the events' steps {steps}")
    later = [starts[k] for k in steps if k > step]
    end = later[0] if later else max(e["t1"] for e in events)
    return starts[step], end, step


def timeline(events: list[dict], ax=None, title: str = "", kinds=("compute", "comm", "wait"),
             t_max: float | None = None, step="auto", legend: bool = True):
    """Gantt chart: one row per rank; compute on the row (forward, backward, optimizer in their
    own colours), communication in flight above it, time blocked in wait() below it.

    `events` as in RunResult.timeline (seconds). step: "auto" zooms on one steady-state step (see
    `step_window`), an int on that step, None shows every event. The legend sits outside the axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    window = step_window(events, step) if step is not None else None
    if window is not None:
        lo, hi, shown = window
        events = [{**e, "t0": max(e["t0"], lo) - lo, "t1": min(e["t1"], hi) - lo}
                  for e in events if e["t1"] > lo and e["t0"] < hi]
        title = f"{title} (step {shown})" if title else f"step {shown}"
    if ax is None:
        ranks = sorted({e["rank"] for e in events}) or [0]
        _, ax = plt.subplots(figsize=(10, 0.6 + 0.7 * len(ranks)))
    offsets = {"compute": 0.0, "comm": -0.28, "wait": 0.28, "idle": 0.0}
    heights = {"compute": 0.5, "comm": 0.22, "wait": 0.22, "idle": 0.5}
    present = []
    for e in events:
        if e["kind"] not in kinds:
            continue
        phase = _phase(e)
        if phase not in present:
            present.append(phase)
        y = e["rank"] + offsets.get(e["kind"], 0.0)
        h = heights.get(e["kind"], 0.3)
        ax.broken_barh([(e["t0"] * 1e3, max((e["t1"] - e["t0"]) * 1e3, 1e-3))], (y - h / 2, h),
                       facecolors=PHASES.get(phase, "gray"), edgecolor="none")
    ranks = sorted({e["rank"] for e in events})
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()  # rank 0 on top; communication drawn above each row, waits below it
    ax.set_xlabel("time (ms)" + (" from the step's start" if window is not None else ""))
    if t_max is not None:
        ax.set_xlim(0, t_max * 1e3)
    ax.set_title(title)
    if legend and present:
        order = [p for p in PHASES if p in present]
        ax.legend(handles=[Patch(color=PHASES[p], label=p) for p in order], loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
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
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
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
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return ax


def scaling_curves(rows: list[dict], mode: str = "strong"):
    """`python -m parlab bench scale`'s sweep (`parlab.planner.scaling.bench_scale.sweep` rows):
    throughput and efficiency vs ranks, measured (solid) beside the model (dashed), one line per
    dimension; the node boundary marked. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    from parlab.planner.scaling import points

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, dim in enumerate(points.DIMENSIONS):
        pts = sorted((r for r in rows if r["dim"] == dim and r["mode"] == mode), key=lambda r: r["n"])
        if not pts:
            continue
        ns = [r["n"] for r in pts]
        color = f"C{i}"
        ax1.plot(ns, [r["throughput"] for r in pts], "o-", color=color, label=dim)
        ax1.plot(ns, [r["pred_throughput"] for r in pts], "--", color=color)
        ax2.plot(ns, [r["eff"] for r in pts], "o-", color=color, label=dim)
        ax2.plot(ns, [r["pred_eff"] for r in pts], "--", color=color)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.axvline(points.NODE, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("ranks (A100s)")
    ax1.set_yscale("log")
    ax1.set_ylabel("samples / A100-second")
    ax2.set_ylabel("scaling efficiency")
    ax1.legend(fontsize=8)
    ax1.set_title(f"{mode} scaling: measured (o-) vs model (--)", fontsize=9)
    ax2.set_title(f"node of {points.NODE} | beyond: the inter-node link", fontsize=9)
    fig.tight_layout()
    return fig
