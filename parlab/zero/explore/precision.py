"""Chapter 02 in mixed precision: the ZeRO paper's 2 + 2 + 12 bytes per parameter measured, and
what 16-bit training does to the loss curve. Time is not compared: the paced clock prices every
dtype at one peak (`parlab.core.roofline`) and this CPU has no fast 16-bit units, so neither
would say what a GPU does; what carries to a GPU is the bytes and the memory, measured here.

Rajbhandari et al., "ZeRO", SC 2020, §3.1 and Fig. 1 (mixed-precision Adam: fp16 parameters and
gradients, K = 12 bytes of fp32 master weights, momentum and variance per parameter);
Micikevicius et al., "Mixed Precision Training", ICLR 2018 (master weights, loss scaling);
Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training", 2019. The mechanism is
`parlab.core.precision`, applied by the one training loop to every scheme that declares it.
"""

from __future__ import annotations

import parlab
from parlab.core.cost import element_bytes
from parlab.zero.cost import memory_formula, mixed_precision_formula, step_bytes
from parlab.zero.explore import psi_of, stage_of
from parlab.zero.shard import FlatLayout

PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")
SYMBOLS = {"fp32": ("16Ψ", "8Ψ + 8Ψ/N", "4Ψ + 12Ψ/N", "16Ψ/N"),
           "bf16-mixed": ("16Ψ", "4Ψ + 12Ψ/N", "2Ψ + 14Ψ/N", "16Ψ/N")}


def padded_psi(result) -> int:
    """Ψ as a rank holds it: the flat units padded to a multiple of N (ZeRO), or the parameters."""
    n = result.config.world_size
    layouts = result.outputs[0].extras.get("layouts")
    if not layouts:
        return psi_of(result)
    return sum(-(-FlatLayout.from_meta(m).numel // n) * n for m in layouts)


def formula_of(result) -> dict:
    """The ZeRO paper's bytes per rank for the run's stage and precision (padded Ψ)."""
    stage = stage_of(result)
    psi, n = padded_psi(result), result.config.world_size
    if result.config.precision == "fp32":
        return memory_formula(stage, psi, n)
    return mixed_precision_formula(stage, psi, n)


def precision_memory(world_size: int = 4, steps: int = 2, model: str = "gpt",
                     schemes=("ddp-naive", "zero1", "zero2", "zero3"), **options) -> list[dict]:
    """Measured model states per rank (largest rank) in fp32 and bf16-mixed, each beside the
    paper's formula for that precision, the bytes each rank sends per step, and whether each run
    equals `single` of its precision (`bf16_match`, `fp32_match`)."""
    rows = []
    refs = {p: parlab.run("single", steps=steps, model=model, precision=p, **options)
            for p in ("fp32", "bf16-mixed")}
    for scheme in schemes:
        row = {"scheme": scheme, "world_size": world_size}
        for precision in ("fp32", "bf16-mixed"):
            result = parlab.run(scheme, world_size=world_size, steps=steps, model=model,
                                precision=precision, **options)
            stage, formula = stage_of(result), formula_of(result)
            key = "fp32" if precision == "fp32" else "bf16"
            for kind in ("params", "grads", "optimizer", "activations"):
                row[f"{key}_{kind}"] = max(m.get(kind, 0) for m in result.memory)
            row[f"{key}_states"] = sum(row[f"{key}_{k}"] for k in ("params", "grads", "optimizer"))
            row[f"{key}_formula"] = int(sum(formula.values()))
            row[f"{key}_symbol"] = SYMBOLS[precision][stage]
            row[f"{key}_sent"] = max(result.bytes_per_rank()) // steps
            row[f"{key}_match"] = result.compare(refs[precision]).match
            if stage:
                numels = [FlatLayout.from_meta(m).numel for m in result.outputs[0].extras["layouts"]]
                row[f"{key}_sent_formula"] = step_bytes(stage, numels, world_size,
                                                        element_bytes(precision))
            row["psi"] = psi_of(result)
        rows.append(row)
    return rows


def print_precision_memory(rows: list[dict]) -> None:
    """The two columns side by side; `match` when measured states equal the formula exactly."""
    print(f"{'':10s} {'fp32: 4 + 4 + 8 bytes/param':>42s}   {'bf16-mixed: 2 + 2 + 12 (ZeRO paper)':>42s}")
    for r in rows:
        cells = []
        for key in ("fp32", "bf16"):
            cells.append(f"{r[f'{key}_symbol']:>11s} {r[f'{key}_states']:>10,} B "
                         f"match: {r[f'{key}_states'] == r[f'{key}_formula']!s:5s}")
        print(f"{r['scheme']:10s} N={r['world_size']} {cells[0]:>38s}   {cells[1]:>38s}")
    for r in rows:
        form = (f" (closed form {r['bf16_sent_formula']:,}: match: "
                f"{r['bf16_sent'] == r['bf16_sent_formula']})" if "bf16_sent_formula" in r else "")
        print(f"{r['scheme']:10s} sends per step: fp32 {r['fp32_sent']:>9,} B, bf16 "
              f"{r['bf16_sent']:>9,} B{form} ×{r['bf16_sent'] / max(r['fp32_sent'], 1):.2f}; "
              f"activations ×{r['bf16_activations'] / max(r['fp32_activations'], 1):.2f}")
    for r in rows:
        print(f"{r['scheme']:10s} equals single of the same precision: fp32 match: "
              f"{r['fp32_match']}, bf16-mixed match: {r['bf16_match']}")


def precision_curves(steps: int = 200, seeds=(0,), precisions=PRECISIONS, window: int = 20,
                     warmup: int = 5, **options) -> dict:
    """Train `single` from each seed in each precision. Per precision: the first seed's losses
    (to plot), skipped steps and loss scales (fp16), and per seed the mean loss
    of the last `window` steps (`finals`)."""
    out = {}
    for precision in precisions:
        for k, seed in enumerate(seeds):
            result = parlab.run("single", steps=steps, precision=precision, seed=seed, **options)
            final = sum(result.losses[-window:]) / min(window, steps)
            if k == 0:
                out[precision] = {"losses": result.losses,
                                  "skipped": result.skipped_steps, "scales": result.loss_scales,
                                  "finals": [], "skipped_by_seed": [],
                                  "window": min(window, steps)}
            out[precision]["finals"].append(final)
            out[precision]["skipped_by_seed"].append(result.skipped_steps)
    return out


def _skipped_text(by_seed: list) -> str:
    """fp16's skipped (overflowed) steps per seed, in words: "no step skipped" or the steps."""
    if not any(by_seed):
        return "no step skipped (no gradient overflowed)"
    return "skipped steps " + "; ".join(
        f"seed {k}: {', '.join(map(str, steps)) or 'none'}" for k, steps in enumerate(by_seed))


def curve_summary(curves: dict, early: int = 10) -> list[str]:
    """How close the curves are (the first `early` steps of the first seed; the final loss per
    seed), what fp16 skipped — computed from the runs, beside the format's round-off u. With
    several seeds the precision gap is put beside fp32's seed-to-seed spread."""
    from parlab.core.precision import unit_roundoff

    ref = curves["fp32"]
    one_seed = "of one seed (not judged against seed-to-seed noise)"
    lines = []
    for precision, c in curves.items():
        if precision == "fp32":
            continue  # the reference itself: nothing to compare
        gap_early = max(abs(a - b) for a, b in zip(c["losses"][:early], ref["losses"][:early]))
        diffs = [a - b for a, b in zip(c["finals"], ref["finals"])]
        lines.append(f"{precision:10s} first {early} steps within {gap_early:.4f} of fp32 "
                     f"(u = {unit_roundoff(precision):.1e}); final loss (mean of the last "
                     f"{c.get('window', 1)} steps) "
                     f"{'by seed' if len(c['finals']) > 1 else one_seed} "
                     f"{', '.join(f'{x:.4f}' for x in c['finals'])} (vs fp32 "
                     f"{', '.join(f'{d:+.4f}' for d in diffs)})"
                     + (f"; {_skipped_text(c['skipped_by_seed'])}" if precision == "fp16-mixed"
                        else ""))
    if len(ref["finals"]) > 1:
        spread = max(ref["finals"]) - min(ref["finals"])
        for precision, c in curves.items():
            if precision == "fp32":
                continue
            mean_diff = sum(a - b for a, b in zip(c["finals"], ref["finals"])) / len(c["finals"])
            verdict = ("within" if abs(mean_diff) <= spread else "beyond")
            lines.append(f"measured: {precision} ends {mean_diff:+.4f} from fp32 on average over "
                         f"{len(c['finals'])} seeds, {verdict} fp32's own seed-to-seed spread "
                         f"{spread:.4f}: " + (
                             "the first steps agree to about u·loss, then each step's rounding "
                             "moves the run onto another trajectory, and the difference is not "
                             f"distinguishable from fp32's own with {len(c['finals'])} seeds"
                             if verdict == "within" else
                             "the precision changes the outcome of this training"))
    return lines


def plot_curves(curves: dict, ax=None):
    """Each 16-bit run's loss minus fp32's, step by step (the curves themselves lie on top of one
    another), fp16's skipped steps marked where it skipped any; the title says how far apart the
    runs ended, from this run."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.5))[1]
    ref = curves["fp32"]["losses"]
    ax.axhline(0, color="black", lw=0.8, label="fp32 (reference)")
    ends = []
    for precision, c in curves.items():
        if precision == "fp32":
            continue
        diff = [a - b for a, b in zip(c["losses"], ref)]
        ax.plot(diff, label=precision, lw=1)
        ends.append(f"{precision} {c['finals'][0] - curves['fp32']['finals'][0]:+.4f}")
        for k, s in enumerate(c["skipped"]):
            ax.axvline(s, color="grey", lw=0.3, label="fp16 step skipped (overflow)" if k == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss − fp32's loss (nats)")
    window = curves["fp32"].get("window", 1)
    ax.set_title(f"16-bit runs against fp32, mean of the last {window} steps (the summary's final "
                 "loss): " + ", ".join(ends), fontsize=9)
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax
