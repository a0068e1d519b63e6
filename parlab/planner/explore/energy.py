"""Go et al. (2025) in notebook 13: what of their characterization this chapter measures, and
what it cannot.

Go et al., "Characterizing the Efficiency of Distributed Training: A Power, Performance, and
Thermal Perspective" (2025, arXiv 2509.10371) sweep tensor, pipeline, data and expert parallelism
and micro-batch sizes on H100, H200 and MI250 clusters and report throughput and utilisation
beside power draw and temperature (`parlab.planner.scaling.energy`). The chapter's sweep
(`parlab.planner.explore.sweep`: every dp × tp × pp × cp plan of the world size, ZeRO 0/1, 1 or 2
micro-batches, run with `nd` on the paced clock) is the performance half of that: each plan's step
time, throughput, bytes and the model's exposed-communication share. The power and thermal half
needs sensors this lab does not have; where the CPU package's RAPL counter is readable, each
plan's energy per step is measured on a raw run (`energy.energy_per_step`), and where it is not,
the table says so from the code's own check (`energy.counter_status`).
"""

from __future__ import annotations

from collections.abc import Callable

from parlab.planner.scaling.energy import POWERCAP, counter_status, energy_per_step


def characterization(sweep, batch_size: int = 12, steps: int = 2, root: str = POWERCAP,
                     run: Callable | None = None) -> dict:
    """Per plan of `sweep`: degrees, micro-batches and rows per micro-batch, measured step,
    throughput (samples per second of accelerator time on a paced sweep), bytes the busiest rank
    sends per step, the model's exposed-communication share, and energy per step where a counter
    exists. Returns {"rows", "status", "unit", "energy_measured"}."""
    clock = getattr(sweep, "clock", None)
    paced = clock is not None and getattr(clock, "paced", False)
    rows = []
    for pred, row in zip(sweep.predictions, sweep.rows):
        plan = pred.plan
        m = plan.microbatches if plan.pp > 1 else 1
        seconds = row["measured_ms"] / 1e3  # paced: the accelerator's seconds
        rows.append({"plan": row["plan"], "dp": plan.dp, "tp": plan.tp, "pp": plan.pp,
                     "cp": plan.cp, "microbatches": m, "rows_per_microbatch": batch_size // (plan.dp * m),
                     "step_ms": row["measured_ms"], "samples_per_s": batch_size / seconds,
                     "bytes": row["measured_bytes"], "exposed": row["exposed_fraction"],
                     "joules_per_step": None})
    energy = energy_per_step([p.plan for p in sweep.predictions], steps, run, root)
    if energy is not None:
        for r, e in zip(rows, energy):
            r["joules_per_step"], r["watts"] = e["joules_per_step"], e["watts"]
    return {"rows": rows, "status": counter_status(root), "unit": sweep.unit,
            "energy_measured": energy is not None, "paced": paced}


def print_characterization(result: dict, top: int | None = None) -> None:
    """The table (the `top` highest-throughput plans and the lowest, or every plan when None),
    then what is measured and what is not, from the result's own fields."""
    rate = "samples/s (accelerator time)" if result["paced"] else "samples/s (this CPU)"
    print(f"step: {result['unit']}; throughput: {rate}")
    print(f"{'plan':<22}{'dp':>3}{'tp':>3}{'pp':>3}{'cp':>3}{'m':>3}{'rows/mb':>8}{'step':>10}"
          f"{'throughput':>12}{'bytes/step':>12}{'exposed':>9}{'J/step':>9}")
    shown = result["rows"]
    if top is not None and len(shown) > top + 1:
        ranked = sorted(shown, key=lambda r: -r["samples_per_s"])
        shown = ranked[:top] + ranked[-1:]
    for r in shown:
        joules = f"{r['joules_per_step']:.2f}" if r["joules_per_step"] is not None else "—"
        print(f"{r['plan']:<22}{r['dp']:>3}{r['tp']:>3}{r['pp']:>3}{r['cp']:>3}"
              f"{r['microbatches']:>3}{r['rows_per_microbatch']:>8}{r['step_ms']:>8.3f}ms"
              f"{r['samples_per_s']:>12,.0f}{r['bytes']:>12,}{r['exposed']:>9.1%}{joules:>9}")
    if len(shown) < len(result["rows"]):
        print(f"({len(shown)} of {len(result['rows'])} plans: the {top} highest throughputs and the lowest)")
    print(result["status"])
    if result["energy_measured"]:
        print("energy per step: measured around a raw run of each plan — the whole CPU package "
              "(every rank and anything else running), not accelerator energy")
    else:
        print("energy per step: not measured (no counter); power and temperature: not measured "
              "(no sensors on this machine) — Go et al.'s power and thermal findings cannot be "
              "checked here")
    rows = result["rows"]
    if rows:
        best = max(rows, key=lambda r: r["samples_per_s"])
        worst = min(rows, key=lambda r: r["samples_per_s"])
        print(f"measured here: throughput from {worst['samples_per_s']:,.0f} ({worst['plan']}) to "
              f"{best['samples_per_s']:,.0f} samples/s ({best['plan']}), "
              f"{best['samples_per_s'] / worst['samples_per_s']:.1f}× across the plans")
