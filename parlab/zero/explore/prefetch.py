"""Chapter 02, §6½: FSDP's prefetch on the link where it can pay, measured beside its ideal.

Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel" (VLDB 2023, §3.4):
prefetch issues the next unit's all-gather while the current one computes and lets the gradient
reduce-scatter travel during backward, hiding at most the compute. So the chapter picks the link
where the forward's all-gathers last as long as the forward computes (`A_f = F`, from measured
compute and ledger bytes: `parlab.engine.bench_regimes.zero3_regime`; in virtual time the real
link whose A_f comes nearest to F), runs zero3 with and without `prefetch=True`, and prints each
step time beside its ideal-overlap estimate:

    without prefetch  F + B + A_f + A_b + R
    with prefetch     max(F, A_f) + max(B, A_b + R)

F, B measured; A_f, A_b, R priced on the link from their ledger bytes. In full: docs/zero.md,
`parlab.zero.explore.prefetch`.
"""

from __future__ import annotations

from parlab.engine.bench_regimes import zero3_regime
from parlab.engine.runner import run


def prefetch_comparison(steps: int = 4, world_size: int = 2, rows_per_rank: int = 24,
                        clock: str = "A100") -> dict:
    """Run zero3 with and without prefetch on the regime's link; measured and ideal step times,
    on `clock` (paced by default: the lesson is about overlap, which the raw clock blurs)."""
    regime = zero3_regime(max(steps, 3), world_size, rows_per_rank, clock=clock)
    results = {prefetch: run("zero3", steps=steps, prefetch=prefetch, link=regime["link"],
                             **regime["run"])
               for prefetch in (False, True)}
    measured = {p: r.step_time(warmup=1) for p, r in results.items()}
    return {"regime": regime, "results": results, "measured": measured,
            "clock": results[True].clock,
            "ideal": {False: regime["ideal_none"], True: regime["ideal_prefetch"]}}


def report_lines(report: dict) -> list[str]:
    """The regime, each variant's step beside its estimate, and what the measurement says."""
    reg, measured, ideal = report["regime"], report["measured"], report["ideal"]
    ms = {k: reg[k] * 1e3 for k in ("forward", "backward", "gather_f", "gather_b", "scatter")}
    from parlab.core.clock import WALL

    clock = report.get("clock", WALL)
    unit = clock.unit
    lines = [f"clock: {clock.label}",
             f"link {reg.get('paced_link', reg['link'])}: F {ms['forward']:.3g} {unit}, "
             f"B {ms['backward']:.3g} {unit} measured; A_f {ms['gather_f']:.3g}, "
             f"A_b {ms['gather_b']:.3g}, R {ms['scatter']:.3g} {unit} on it"]
    for prefetch in (False, True):
        lines.append(f"  zero3 prefetch={prefetch!s:5}: step {measured[prefetch] * 1e3:6.4g} {unit} "
                     f"measured, {ideal[prefetch] * 1e3:6.4g} {unit} ideal overlap")
    gain, ceiling = measured[False] / measured[True], ideal[False] / ideal[True]
    agrees = gain >= 1 + 0.5 * (ceiling - 1)
    lines.append(f"prefetch: {gain:.2f}× faster measured, {ceiling:.2f}× at ideal overlap"
                 + (": agrees with the model (at least half the ideal gain)" if agrees else ""))
    if gain < 1.0:
        lines.append("  the measurement disagrees with the model: prefetch was slower here. "
                     + ("Its extra gathers in flight compete with the compute for this machine's "
                        "two cores, which a GPU's copy engines would not." if not clock.paced else
                        "In virtual time that is the schedule's, not the machine's: the timelines "
                        "show which gather a span waited on."))
    elif gain < 1 + 0.5 * (ceiling - 1):
        lines.append(f"  less than half the ideal gain: the no-prefetch step came within "
                     f"{measured[False] / ideal[False]:.2f}× of its estimate, the prefetch step "
                     f"within {measured[True] / ideal[True]:.2f}× of its own: the overlap lost "
                     "time to the first unit's gather, which nothing precedes"
                     + ("" if clock.paced else ", and to the cores the gathers share with the compute"))
    return lines


def print_prefetch(report: dict) -> None:
    print("\n".join(report_lines(report)))


def draw_prefetch(report: dict):
    """Both runs' timelines, one steady step each, one above the other; returns the figure."""
    import matplotlib.pyplot as plt

    from parlab import viz

    fig, axes = plt.subplots(2, 1, figsize=(12, 5), sharex=True)
    for ax, prefetch in zip(axes, (False, True)):
        viz.timeline(report["results"][prefetch].timeline, ax=ax, legend=not prefetch,
                     title=f"zero3 prefetch={prefetch}, link {report['regime']['link'].name}")
    fig.tight_layout()
    return fig
