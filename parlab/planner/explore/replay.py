"""Chapter 13, MAD-Max's question: replay a measured run's trace on other hardware.

`parlab.planner.trace_replay` takes one paced step of a run — every rank's compute and
communication in issue order, with their waits — and replays it with compute and links
re-priced. First it must reproduce the run it came from (the check beside every row); then the
what-ifs: 2× compute (every compute span twice as fast: its operators' launches and FLOPs alike),
2× bandwidth, half the latency α. Which investment pays, for which plan, is
the co-design question of Hsia et al., "MAD-Max Beyond Single-Node" (ISCA 2024, §6).
"""

from __future__ import annotations

import parlab
from parlab.planner.trace_replay import Trace, replay

# the plans the section replays: (scheme, world size, options) — CI-small, paced, NVLink
PLANS = (("ddp-overlap", 4, {"bucket_mb": 0.05}), ("zero3", 2, {}),
         ("pp-1f1b", 2, {"microbatches": 4}), ("tp", 2, {}))
WHAT_IFS = {"2× compute": {"flops": 2.0}, "2× bandwidth": {"bandwidth": 2.0},
            "½ latency α": {"latency": 2.0}}
PUBLISHED = (0.14, 0.32)  # MAD-Max's non-overlapped communication share of GPU hours (Fig. 2)


def replay_rows(plans=PLANS, link: str = "NVLink", clock: str = "A100", steps: int = 2,
                batch_size: int = 16) -> list[dict]:
    """Run every plan (paced), replay its step 1, and the what-ifs on the same trace."""
    rows = []
    for scheme, world_size, options in plans:
        r = parlab.run(scheme, world_size=world_size, steps=steps, clock=clock, link=link,
                       batch_size=batch_size, **options)
        trace = Trace.from_run(r, step=1)
        base = replay(trace)
        row = {"plan": f"{scheme} ×{world_size}", "measured_s": trace.measured_step,
               "replay_s": base["step_s"], "error": base["step_s"] / trace.measured_step - 1,
               "exposed_share": base["exposed_share"]}
        for name, scale in WHAT_IFS.items():
            row[name] = replay(trace, **scale)["step_s"] / base["step_s"]
        rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> str:
    head = (f"{'plan':16s} {'measured ms':>11s} {'replay ms':>9s} {'error':>6s} {'exposed':>7s}  "
            + "  ".join(f"{n:>12s}" for n in WHAT_IFS) + "   pays most")
    lines = [head]
    for row in rows:
        ms = 1e3  # the accelerator's seconds -> ms, the chapter's unit
        best = min(WHAT_IFS, key=lambda n: row[n])
        lines.append(f"{row['plan']:16s} {row['measured_s'] * ms:11.4f} {row['replay_s'] * ms:9.4f} "
                     f"{row['error']:+6.1%} {row['exposed_share']:7.0%}  "
                     + "  ".join(f"{'×' + format(row[n], '.2f'):>12s}" for n in WHAT_IFS)
                     + f"   {best}")
    return "\n".join(lines)


def verdict(rows: list[dict], tolerance: float = 0.10) -> list[str]:
    """The checks and the diagnosis, computed from the rows."""
    worst = max(rows, key=lambda row: abs(row["error"]))
    out = [f"replay vs the run it replays: worst {worst['error']:+.1%} ({worst['plan']}) -> "
           + ("within" if abs(worst["error"]) <= tolerance else "NOT within")
           + f" {tolerance:.0%}"]
    shares = [row["exposed_share"] for row in rows]
    lo, hi = PUBLISHED
    inside = [row["plan"] for row in rows if lo <= row["exposed_share"] <= hi]
    steps = [row["measured_s"] for row in rows]
    out.append(f"exposed communication {min(shares):.0%}–{max(shares):.0%} of the step (a "
               f"pipeline's includes its bubble: a stage waiting for its peer's activations); "
               f"MAD-Max reports {lo:.0%}–{hi:.0%} of production GPU hours: "
               + (f"in that range: {', '.join(inside)}" if inside else "not reproduced here")
               + (f" — the tiny GPT's steps last {1e3 * min(steps):.3g}–{1e3 * max(steps):.3g} "
                  "A100 ms of operator launches, while its messages are kilobytes that NVLink "
                  "moves in microseconds; production models move megabytes per collective"
                  if max(shares) < lo else ""))
    for name in WHAT_IFS:
        gains = [row["plan"] for row in rows if min(WHAT_IFS, key=lambda n: row[n]) == name]
        if gains:
            out.append(f"{name} pays most for: {', '.join(gains)}")
    return out
