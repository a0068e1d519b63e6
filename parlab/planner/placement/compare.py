"""The paper's comparison: the planner against DualPipe and 1F1B, bubble at equal memory.

She et al. (2025, arXiv 2503.09357) report, against DeepSeek's DualPipe, "comparable or superior
performance, reducing computational bubbles by half under the same memory constraints" (abstract).
`compare` asks it of the pipeline chapter's schedules: 1F1B and DualPipe as
chapter 04 builds them, each beside the planner (`parlab.planner.placement.schedule_mip.plan`) on its
task set, placement and memory, all timed by one simulator; `verdicts` says, from the rows, where
the paper's "about half" holds here and where not, against DualPipe's own action lists (unit
ticks; the same question on real layers priced at an accelerator, with operators free to move:
`parlab.planner.placement.real_layers`). The report's Table 2 formula (`report_fraction`) is kept
beside the rows, not compared with the planner: it charges DualPipe more idle time than its own
lists have, so a ratio to it would measure the formula, not a planner.
"""

from __future__ import annotations

from parlab.pipeline import cost as pp_cost
from parlab.pipeline import cost_dualpipe as pp_cost_dualpipe
from parlab.planner.placement.schedule_mip import (
    Units,
    makespan,
    peak_chunks,
    plan,
    split,
    weight_chunks,
)


def report_fraction(name: str, p: int, m: int, units: Units) -> float:
    """The DeepSeek-V3 report's Table 2 bubble for `name` ("1f1b" or "dualpipe") in these units
    (its F&B = F + B + W: one chunk at a time), as a fraction of a rank's step (messages free)."""
    idle = pp_cost_dualpipe.report_bubble(name, p, units.forward, units.backward, units.weight)
    busy = m * (units.forward + units.backward + units.weight)
    return idle / (busy + idle)


def compare(p: int = 4, m: int = 8, units: Units | None = None, time_limit: float = 20.0,
            schedules: tuple = ("1F1B", "DualPipe")) -> list[dict]:
    """Each of `schedules` (1F1B, DualPipe) and the planner at its memory, on one simulator: rows
    with makespan (ticks), bubble, peak activation chunks and weight chunks per rank (the
    busiest), and for the planner its solve time and status."""
    from parlab.pipeline.dualpipe import check_sizes
    from parlab.pipeline.schedules import make_schedule
    check_sizes(p, m)
    units = Units() if units is None else units
    unknown = [s for s in schedules if s not in ("1F1B", "DualPipe")]
    if unknown or not schedules:
        raise ValueError(f"schedules={schedules!r}: choose from ('1F1B', 'DualPipe')")
    rows = []
    for name, horizon, what in (("1F1B", None, "1 stage per rank"),
                                ("DualPipe", None, "2 mirrored stages per rank")):
        if name not in schedules:
            continue
        base = make_schedule(name.lower(), p, m)
        span, events = makespan(base, units)
        peak = max(peak_chunks(split(base)))
        rows.append({"schedule": name, "placement": what, "makespan": span,
                     "bubble": pp_cost.bubble_of(events), "peak_chunks": peak,
                     "weight_chunks": max(weight_chunks(base)),
                     "report": report_fraction(name.lower(), p, m, units),
                     "solve_s": None, "status": "", "p": p, "m": m, "units": units})
        if name == "1F1B":  # ZB-H1 (chapter 04) holds 1F1B's peak too: a feasible point as well
            horizon = min(int(span), int(makespan(make_schedule("zb", p, m), units)[0]))
        planned = plan(base, units, cap=peak, horizon=horizon, time_limit=time_limit)
        span, events = makespan(planned.schedule, units)
        rows.append({"schedule": f"planner at {name}'s memory", "placement": what,
                     "makespan": span, "bubble": pp_cost.bubble_of(events),
                     "peak_chunks": max(peak_chunks(planned.schedule)),
                     "weight_chunks": max(weight_chunks(planned.schedule)), "report": None,
                     "solve_s": planned.solve_s, "status": planned.status, "p": p, "m": m,
                     "units": units, "planned": planned})
    return rows


def verdicts(rows: list[dict]) -> list[str]:
    """What the rows say about the paper's claim, each line computed from them."""
    by = {r["schedule"]: r for r in rows}
    u, first = rows[0]["units"], rows[0]
    out = [f"p={first['p']}, m={first['m']}, F={u.forward} B={u.backward} W={u.weight} ticks, "
           f"message {u.latency} tick(s)"]

    def ratio(a, b):
        return a / b if b > 0 else float("nan")

    def half(r):
        return "about half, as the paper reports" if 0.4 <= r <= 0.6 else (
            "no reduction" if r >= 0.99 else "a reduction, but not about half")

    if "DualPipe" in by:
        out += _dualpipe_verdicts(by["DualPipe"], by["planner at DualPipe's memory"], u, half, ratio)
    if "1F1B" in by:
        one, p1 = by["1F1B"], by["planner at 1F1B's memory"]
        r3 = ratio(p1["bubble"], one["bubble"])
        out.append(f"planner at 1F1B's memory ({one['peak_chunks']} chunks, B split into B and W) "
                   f"vs 1F1B: {p1['bubble']:.1%} vs {one['bubble']:.1%} = {r3:.2f}× (1F1B's closed "
                   f"form (p−1)/(m+p−1) = {one['report']:.1%} when messages are free)")
    return out


def _dualpipe_verdicts(dual: dict, pd: dict, u: Units, half, ratio) -> list[str]:
    out = []
    proven = pd["status"] == "optimal"
    r = ratio(pd["bubble"], dual["bubble"])
    out.append(f"planner vs DualPipe's own action lists, both at DualPipe's memory ({dual['peak_chunks']} "
               f"activation chunks, {dual['weight_chunks']} weight chunks per rank), one simulator: "
               f"bubble {pd['bubble']:.1%} vs {dual['bubble']:.1%} = {r:.2f}×: {half(r)}"
               + (" — and the MIP proves nothing shorter exists" if proven else
                  f" (the MIP stopped before proving it: {pd['status']})"))
    return out
