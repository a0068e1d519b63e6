"""Notebook 10's "When to use it (from this run)": when subnetwork data parallelism pays and when it
does not, printed from the results the chapter already holds — the memory and bytes sweep
(`explore.sweep`), the full-model loss of the GPT and of the spirals MLP (`explore.curve_summary`
of `explore.curves`) and the step times on a link (`explore.step_times`) — each threshold measured
in this run.

Singh, Khalid, Oyallon, Belilovsky, "Model Parallelism With Subnetwork Data Parallelism" (2025).
"""

from __future__ import annotations

import pandas as pd


def memory_threshold(table: pd.DataFrame) -> str | None:
    """The bullet on memory: forward masking at k = 1 (the configuration that saved most), the
    largest rank's states as a share of DDP's 16Ψ and the model size that therefore fits where DDP's
    does (1 / that share); None when the sweep has no such row."""
    fwd = table[(table.k == 1) & (table["mask"] == "forward")]
    if not len(fwd):
        return None
    best = fwd.loc[fwd.saved.idxmax()]
    if best.saved <= 0:
        return ("- memory: at k = 1 of N = 1 every rank owns everything — SDP is DDP and saves nothing; "
                "it needs N ≥ 2 ranks")
    share = 1 - best.saved
    return (f"- when DDP's 16Ψ per rank does not fit but 16Ψ_r does: forward masking at k = 1 "
            f"({best.granularity} level) left the largest rank {share:.0%} of DDP's states, so, at the same "
            f"owned fraction, a model up to {1 / share:.2f}× what DDP holds fits the same memory — at "
            f"{best.bytes_vs_ddp:.2f}× DDP's bytes; k = N is DDP and saves nothing")


def quality_threshold(gpt: pd.DataFrame, mlp: pd.DataFrame | None, tolerance: float,
                      skips: dict | None = None) -> str:
    """The bullet on quality: forward masking only where the full model's loss stays within
    `tolerance` of DDP's — the worst forward gap of the GPT (skip connections) and of the spirals
    MLP (none), each with its verdict, and backward masking's gap where forward's is too large."""
    def worst(rows: pd.DataFrame, mask: str) -> float:
        return rows[rows["mask"] == mask].loss_gap.max()

    def within(gap: float) -> str:
        return "within" if abs(gap) <= tolerance else "NOT within"
    line = (f"- forward masking only where the full model's loss stays within {tolerance:.0%} of DDP's: "
            f"the tiny GPT (skip connections) {worst(gpt, 'forward'):+.2%} — {within(worst(gpt, 'forward'))}")
    if skips is not None:  # `explore.skips.skip_ablation`: the same GPT, its skips removed
        gap = skips[False]["loss_gap"]
        line += f"; the same GPT with its skips removed {gap:+.1%} vs its own DDP — {within(gap)}"
    if mlp is not None and len(mlp):
        f, b = worst(mlp, "forward"), worst(mlp, "backward")
        line += (f"; the spirals MLP (none) {f:+.1%} — {within(f)}"
                 + (f", where backward masking's unbiased gradient gave {b:+.1%} — {within(b)}"
                    if abs(f) > tolerance else ""))
    return line


def time_threshold(times: list[dict]) -> str | None:
    """The bullet on time: each SDP row's step and bytes over the fastest DDP row's (the rows whose
    mask is "—"; in `explore.step_times` that is ddp-bucketed, one message per bucket as SDP sends
    one per owner set) on the run's link, and whether fewer bytes bought less time; None without
    both kinds of row."""
    ddp = [r for r in times if r["mask"] == "—"]
    sdp = [r for r in times if r["mask"] != "—"]
    if not ddp or not sdp:
        return None
    base = min(ddp, key=lambda r: r["step_ms"])
    parts, faster = [], 0
    for r in sdp:
        step, sent = r["step_ms"] / base["step_ms"], r["bytes_per_step"] / base["bytes_per_step"]
        faster += step < 1
        parts.append(f"{r['mask']}/{r['granularity']} {step:.2f}× its step for {sent:.2f}× its bytes")
    verdict = ("every SDP row was faster: on this link the bytes saved (and the smaller subnetwork) "
               "show as time" if faster == len(sdp) else
               f"only {faster} of {len(sdp)} SDP rows were faster: one message per owner set, or "
               "the masking's own operators, cost more than the bytes saved (the step-time "
               "table's verdicts say which)")
    return (f"- in time, against {base['scheme']} on the link ({base['clock']}): " + ", ".join(parts)
            + f" — {verdict}")


def when_to_use(table: pd.DataFrame, gpt: pd.DataFrame, mlp: pd.DataFrame | None, times: list[dict],
                tolerance: float = 0.02, skips: dict | None = None) -> None:
    """Print "When to use it (from this run):" — memory (`explore.sweep`'s table), quality
    (`explore.curve_summary` of the GPT's and the MLP's curves) and time (`explore.step_times`)
    thresholds, each from this run."""
    print("When to use it (from this run):")
    for line in (memory_threshold(table), quality_threshold(gpt, mlp, tolerance, skips),
                 time_threshold(times)):
        if line:
            print(line)
